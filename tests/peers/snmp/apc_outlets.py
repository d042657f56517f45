"""snmpsim variation module: the outlets of an APC rPDU (PowerNet-MIB rPDUOutletControl/Status tables).

Loaded by pdu_snmp.py through snmpsim's --variation-modules-dir; its records look like
  1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.1|2:apc_outlets|outlet=1,column=command
Module options (--variation-module-options=apc_outlets:state=PATH,log=PATH,transition=SECONDS):
  state       JSON file {"1": {"state": "On"|"Off", "target": null|"On"|"Off", "due": 0.0}, ...}; read on
              every request and written on every change (tmp + rename), so a test sees and forces states
  log         JSON lines, one per SET of a command column: {"t", "outlet", "command", "accepted"}
  transition  seconds between an accepted immediateOn/immediateOff and the state change; meanwhile the
              command-pending column reads commandPending(1) and the state column the old state

Columns: state (rPDUOutletStatusOutletState: 1 on, 2 off), pending (rPDUOutletStatusCommandPending:
1 pending, 2 none), command (rPDUOutletControlOutletCommand: reads 1/2 like the state; a SET of 1 or 2
is accepted, every other value is refused with wrongValue and changes nothing).
"""
import json
import os
import time

from pysnmp.smi import error

from snmpsim.utils import split

ON, OFF = 'On', 'Off'


def init(**context):
    options = dict(split(x, ':') for x in split(context['options'] or '', ','))
    moduleContext['state'] = options['state']
    moduleContext['log'] = options.get('log')
    moduleContext['transition'] = float(options.get('transition', '0'))


def _load():
    with open(moduleContext['state'], encoding='utf-8') as f:
        return json.load(f)


def _store(outlets):
    path = moduleContext['state']
    with open(path + '.tmp', 'w', encoding='utf-8') as f:
        json.dump(outlets, f)
    os.replace(path + '.tmp', path)


def _settle(outlets, now):
    changed = False
    for outlet in outlets.values():
        if outlet.get('target') and outlet.get('due', 0) <= now:
            outlet['state'], outlet['target'], outlet['due'] = outlet['target'], None, 0
            changed = True
    return changed


def _log(**entry):
    if moduleContext['log']:
        with open(moduleContext['log'], 'a', encoding='utf-8') as f:
            f.write(json.dumps({'t': round(time.time(), 3), **entry}) + '\n')


def variate(oid, tag, value, **context):
    if not context['nextFlag'] and not context['exactMatch']:
        return context['origOid'], tag, context['errorStatus']
    settings = dict(split(x, '=') for x in split(value, ','))
    number, column = settings['outlet'], settings['column']
    now = time.time()
    outlets = _load()
    changed = _settle(outlets, now)
    outlet = outlets[number]
    if context['setFlag']:
        if column != 'command':
            raise error.NotWritableError(name=oid, idx=max(0, context['varsTotal'] - context['varsRemaining'] - 1))
        command = int(context['origValue'])
        accepted = command in (1, 2)
        _log(outlet=int(number), command=command, accepted=accepted)
        if not accepted:
            raise error.WrongValueError(name=oid, idx=max(0, context['varsTotal'] - context['varsRemaining'] - 1))
        target = ON if command == 1 else OFF
        if target == outlet['state'] and not outlet.get('target'):
            pass
        elif moduleContext['transition'] > 0:
            outlet['target'], outlet['due'] = target, now + moduleContext['transition']
        else:
            outlet['state'], outlet['target'], outlet['due'] = target, None, 0
        changed = True
        # the answer to a SET echoes the value set
        answer = str(command)
    elif column == 'pending':
        answer = '1' if outlet.get('target') else '2'
    else:  # state and command read the present state
        answer = '1' if outlet['state'] == ON else '2'
    if changed:
        _store(outlets)
    return oid, tag, answer


def shutdown(**context):
    pass
