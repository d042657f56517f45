//! Redfish PowerDistribution outlets (DMTF `Outlet` schema, DSP2056): an outlet is
//! `{service root}/PowerEquipment/RackPDUs/{pdu}/Outlets/{outlet}`; its `PowerState` (`On`/`Off`),
//! `PowerStateInTransition` (a delayed transition is coming: not Off yet) and, where metered,
//! `PowerWatts.Reading` (the `Total` power sensor excerpt) make a reading; `#Outlet.PowerControl`
//! with `PowerState: Off|On` switches it (never `PowerCycle`, never a delay).
//!
//! The transport is the BMC client's ([`RedfishClient`]): the same endpoint rules, TLS trust (CA
//! bundle or pin), Basic auth on every request, timeouts, bounded read retries, no redirect followed
//! and bodies read as strict JSON. A PDU is a BMC-shaped thing to talk to; only what is read differs.

use std::fmt;

use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use reqwest::Url;
use serde_json::{Value, json};

use super::{OutletCommand, OutletReading, OutletState, Outlets, PduError};
use crate::bmc::{MAX_VALUE_CHARS, RedfishClient, RedfishConfig, SetupError, bounded, paths};

/// Everything but unreserved characters is encoded in an id put into a path.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// The longest id accepted for a rack PDU or an outlet.
const MAX_ID_CHARS: usize = 128;

/// An outlet: its rack PDU's `Id` and its own, as the binding names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutletId {
    rack_pdu: String,
    outlet: String,
}

impl OutletId {
    /// Each id is one path segment: not empty, not `.` or `..`, without `/`, `\`, `%` (a server that
    /// decodes twice could read it as anything) or control characters.
    pub fn new(rack_pdu: &str, outlet: &str) -> Result<Self, PduError> {
        for id in [rack_pdu, outlet] {
            let usable = !id.is_empty()
                && id.chars().count() <= MAX_ID_CHARS
                && id != "."
                && id != ".."
                && !id.chars().any(|c| matches!(c, '/' | '\\' | '%') || c.is_control());
            if !usable {
                return Err(PduError::Setup(format!("{:?} is not a usable Redfish id", bounded(id, 64))));
            }
        }
        Ok(Self { rack_pdu: rack_pdu.to_owned(), outlet: outlet.to_owned() })
    }
}

impl fmt::Display for OutletId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RackPDUs/{}/Outlets/{}", self.rack_pdu, self.outlet)
    }
}

/// A Redfish PDU (one service root, any of its rack PDUs).
#[derive(Clone, Debug)]
pub struct RedfishPdu {
    client: RedfishClient,
    origin: Url,
}

/// What one outlet body says.
#[derive(Debug, PartialEq)]
struct Outlet {
    reading: OutletReading,
    /// `Actions["#Outlet.PowerControl"].target`, resolved on the origin, when advertised.
    control_target: Option<String>,
}

impl RedfishPdu {
    pub fn new(config: RedfishConfig) -> Result<Self, SetupError> {
        let client = RedfishClient::new(config)?;
        let origin = Url::parse(&client.origin()).map_err(|e| SetupError::Endpoint(e.to_string()))?;
        Ok(Self { client, origin })
    }

    fn path(&self, outlet: &OutletId) -> String {
        let encode = |id: &str| utf8_percent_encode(id, SEGMENT).to_string();
        format!(
            "{}/PowerEquipment/RackPDUs/{}/Outlets/{}",
            self.client.service_root(),
            encode(&outlet.rack_pdu),
            encode(&outlet.outlet)
        )
    }

    async fn outlet(&self, path: &str) -> Result<Outlet, PduError> {
        let body = self.client.read(path).await?;
        parse_outlet(&self.origin, path, &body)
    }
}

impl Outlets for RedfishPdu {
    type Outlet = OutletId;

    async fn read(&self, outlet: &OutletId) -> Result<OutletReading, PduError> {
        Ok(self.outlet(&self.path(outlet)).await?.reading)
    }

    /// Reads the outlet first for its advertised action target (as fence_redfish does), which must lie
    /// below the outlet: a target elsewhere would switch another outlet.
    async fn switch(&self, outlet: &OutletId, command: OutletCommand) -> Result<(), PduError> {
        let path = self.path(outlet);
        let target =
            self.outlet(&path).await?.control_target.unwrap_or_else(|| format!("{path}/Actions/Outlet.PowerControl"));
        let (outlet_url, target_url) = (self.client.url(&path)?, self.client.url(&target)?);
        if !paths::below(outlet_url.path(), target_url.path()) {
            return Err(PduError::Protocol(format!(
                "outlet {outlet}: its PowerControl target {:?} is not below the outlet",
                bounded(&target, 160)
            )));
        }
        let state = match command {
            OutletCommand::Off => "Off",
            OutletCommand::On => "On",
        };
        let what = format!("PowerControl {state}");
        self.client.post(target_url, &target, json!({ "PowerState": state }), &what).await?;
        Ok(())
    }
}

/// Reads an outlet body answered at `at`. A missing or malformed `PowerState` is an error, never a
/// default; `PowerStateInTransition` and `PowerWatts` may be absent (or `null`: the sensor is not
/// readable now) but not malformed. The outlet must name itself where it answered.
fn parse_outlet(origin: &Url, at: &str, outlet: &Value) -> Result<Outlet, PduError> {
    let problem = |text: String| PduError::Protocol(format!("outlet at {}: {text}", bounded(at, 160)));
    let state = match outlet.get("PowerState") {
        Some(Value::String(state)) if state == "On" => OutletState::On,
        Some(Value::String(state)) if state == "Off" => OutletState::Off,
        Some(Value::String(state)) => OutletState::unknown(state),
        _ => return Err(problem("no PowerState string".into())),
    };
    let pending = match outlet.get("PowerStateInTransition") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(pending)) => *pending,
        Some(_) => return Err(problem("PowerStateInTransition is not a boolean".into())),
    };
    // A `PowerWatts` sensor excerpt says the outlet is metered, whatever its `Reading` holds (L4).
    let metered = matches!(outlet.get("PowerWatts"), Some(Value::Object(_)));
    let watts = match outlet.get("PowerWatts") {
        None | Some(Value::Null) => None,
        Some(sensor @ Value::Object(_)) => match sensor.get("Reading") {
            None | Some(Value::Null) => None,
            Some(Value::Number(reading)) => reading.as_f64(),
            Some(other) => {
                let shown = bounded(&other.to_string(), MAX_VALUE_CHARS);
                return Err(problem(format!("PowerWatts.Reading {shown} is not a number")));
            }
        },
        Some(_) => return Err(problem("PowerWatts is not a sensor excerpt".into())),
    };
    let resolve = |what: &str, reference: &str| {
        let shown = bounded(reference, 160);
        let url = paths::resolve(origin, reference).map_err(|p| problem(format!("its {what} {shown:?}: {p}")))?;
        if url.query().is_some() || url.fragment().is_some() {
            return Err(problem(format!("its {what} {shown:?} has a query or fragment")));
        }
        Ok(url.path().to_owned())
    };
    let named = match outlet.get("@odata.id") {
        None => None,
        Some(Value::String(id)) => Some((id, resolve("@odata.id", id)?)),
        Some(_) => return Err(problem("@odata.id is not a string".into())),
    };
    if let Some((id, path)) = named
        && !paths::same_resource(&path, at)
    {
        return Err(problem(format!("it names itself {:?}, not where it answered", bounded(id, 160))));
    }
    let control_target = match outlet.pointer("/Actions/#Outlet.PowerControl/target") {
        None => None,
        Some(Value::String(target)) => Some(resolve("PowerControl target", target)?),
        Some(_) => return Err(problem("the PowerControl target is not a string".into())),
    };
    Ok(Outlet { reading: OutletReading { state, pending, watts, metered }, control_target })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::bmc::{Credentials, Password, json as strict, tls};

    const AT: &str = "/redfish/v1/PowerEquipment/RackPDUs/1/Outlets/A1";

    fn origin() -> Url {
        Url::parse("https://10.0.0.9:8443").unwrap()
    }

    fn parse(body: &Value) -> Result<Outlet, PduError> {
        parse_outlet(&origin(), AT, body)
    }

    fn reading(body: &Value) -> OutletReading {
        parse(body).unwrap().reading
    }

    #[test]
    fn an_outlet_reads_its_state_transition_and_draw() {
        let body = json!({"@odata.id": AT, "Id": "A1", "PowerState": "Off", "PowerStateInTransition": false,
            "PowerWatts": {"DataSourceUri": format!("{AT}/Sensors/Power"), "Reading": 0.0},
            "Actions": {"#Outlet.PowerControl": {"target": format!("{AT}/Actions/Outlet.PowerControl"),
                "PowerState@Redfish.AllowableValues": ["On", "Off"]}}});
        let outlet = parse(&body).unwrap();
        assert_eq!(
            outlet.reading,
            OutletReading { state: OutletState::Off, pending: false, watts: Some(0.0), metered: true }
        );
        assert_eq!(outlet.control_target.as_deref(), Some(&*format!("{AT}/Actions/Outlet.PowerControl")));
        let on = reading(&json!({"PowerState": "On", "PowerStateInTransition": true, "PowerWatts": {"Reading": 231}}));
        assert_eq!(on, OutletReading { state: OutletState::On, pending: true, watts: Some(231.0), metered: true });
    }

    #[test]
    fn absent_metering_and_transition_read_as_none() {
        for body in [
            json!({"PowerState": "Off"}),
            json!({"PowerState": "Off", "PowerWatts": null, "PowerStateInTransition": null}),
        ] {
            assert_eq!(
                reading(&body),
                OutletReading { state: OutletState::Off, pending: false, watts: None, metered: false },
                "{body}"
            );
        }
    }

    #[test]
    fn a_power_watts_sensor_with_a_null_or_missing_reading_is_a_silent_meter() {
        for body in [
            json!({"PowerState": "Off", "PowerWatts": {"DataSourceUri": "/x"}}),
            json!({"PowerState": "Off", "PowerWatts": {"Reading": null}}),
        ] {
            let read = reading(&body);
            assert_eq!(
                read,
                OutletReading { state: OutletState::Off, pending: false, watts: None, metered: true },
                "{body}"
            );
            assert_eq!(crate::levels::proves_off(&read, 5.0), Err(crate::pdu::NotOff::MeterSilent), "{body}");
        }
    }

    #[test]
    fn only_on_and_off_are_known_states() {
        for text in ["PowerCycle", "off", "OFF", "", "PoweringOff"] {
            assert_eq!(reading(&json!({"PowerState": text})).state, OutletState::Unknown(text.into()), "{text:?}");
        }
    }

    #[test]
    fn malformed_fields_are_refused_never_defaulted() {
        for body in [
            json!({}),
            json!({"PowerState": null}),
            json!({"PowerState": true}),
            json!({"PowerState": "Off", "PowerStateInTransition": "false"}),
            json!({"PowerState": "Off", "PowerWatts": 12}),
            json!({"PowerState": "Off", "PowerWatts": {"Reading": "12"}}),
            json!({"PowerState": "Off", "@odata.id": 7}),
            json!({"PowerState": "Off", "Actions": {"#Outlet.PowerControl": {"target": 7}}}),
        ] {
            assert!(matches!(parse(&body), Err(PduError::Protocol(_))), "{body}");
        }
    }

    #[test]
    fn an_outlet_must_name_itself_where_it_answered_and_keep_its_target_on_the_origin() {
        assert!(parse(&json!({"PowerState": "Off", "@odata.id": format!("{AT}/")})).is_ok());
        for elsewhere in [
            "/redfish/v1/PowerEquipment/RackPDUs/1/Outlets/A2",
            "/redfish/v1/PowerEquipment/RackPDUs/1/Outlets/A1/../A2",
            "https://other/redfish/v1/PowerEquipment/RackPDUs/1/Outlets/A1",
        ] {
            assert!(parse(&json!({"PowerState": "Off", "@odata.id": elsewhere})).is_err(), "{elsewhere}");
        }
        for target in ["https://evil/redfish/v1/x", "/redfish/v1/x?y=1", "//evil/x"] {
            let body = json!({"PowerState": "Off", "Actions": {"#Outlet.PowerControl": {"target": target}}});
            assert!(parse(&body).is_err(), "{target}");
        }
    }

    #[test]
    fn device_text_in_errors_is_bounded() {
        let body = json!({"PowerState": "Off", "PowerWatts": {"Reading": format!("\u{1b}]0;{}", "w".repeat(5000))}});
        let error = parse(&body).unwrap_err().to_string();
        assert!(error.chars().count() < 400 && !error.chars().any(char::is_control), "{error}");
        let shown = reading(&json!({"PowerState": "z".repeat(5000)})).state.to_string();
        assert_eq!(shown.chars().count(), MAX_VALUE_CHARS);
    }

    #[test]
    fn outlet_ids_are_single_path_segments_and_encoded() {
        for (pdu, outlet) in
            [("", "A1"), ("1", ""), ("..", "A1"), ("1", "a/b"), ("1", "a\\b"), ("1", "a\nb"), ("1", "a%2f")]
        {
            assert!(OutletId::new(pdu, outlet).is_err(), "{pdu:?} {outlet:?}");
        }
        let pdu = RedfishPdu::new(RedfishConfig {
            endpoint: "https://10.0.0.9:8443".into(),
            trust: tls::Trust { insecure_skip_verify: true, ..tls::Trust::default() },
            credentials: Credentials { username: "u".into(), password: Password::new("p".into()) },
            request_timeout: std::time::Duration::from_secs(1),
            read_retries: 0,
            retry_backoff: std::time::Duration::from_millis(1),
        })
        .unwrap();
        let id = OutletId::new("rack 1", "A?1#").unwrap();
        assert_eq!(pdu.path(&id), "/redfish/v1/PowerEquipment/RackPDUs/rack%201/Outlets/A%3F1%23");
        assert_eq!(paths::segments(&pdu.path(&id)).unwrap().last().map(String::as_str), Some("A?1#"));
        assert!(pdu.client.url(&pdu.path(&id)).is_ok());
        assert_eq!(id.to_string(), "RackPDUs/rack 1/Outlets/A?1#");
    }

    /// An outlet body from the bytes a PDU may send, as the client reads it.
    fn from_bytes(bytes: &[u8]) -> Result<Outlet, PduError> {
        let body = strict::parse(bytes).map_err(|e| PduError::Protocol(e.to_string()))?;
        parse(&body)
    }

    fn value() -> impl Strategy<Value = String> {
        let scalar = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| f.to_string()),
            Just("\"On\"".to_owned()),
            Just("\"Off\"".to_owned()),
            Just(format!("\"{AT}\"")),
            "\"[a-zA-Z0-9 ./#@-]{0,12}\"",
        ];
        let key = prop_oneof![
            Just("PowerState"),
            Just("PowerStateInTransition"),
            Just("PowerWatts"),
            Just("Reading"),
            Just("@odata.id"),
            Just("Actions"),
            Just("#Outlet.PowerControl"),
            Just("target"),
        ];
        scalar.prop_recursive(4, 32, 5, move |inner| {
            prop::collection::vec((key.clone(), inner), 0..5).prop_map(|fields| {
                let fields: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", fields.join(","))
            })
        })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = from_bytes(&bytes);
        }

        #[test]
        fn a_body_reads_off_only_when_its_power_state_is_off(text in value()) {
            let lenient: Option<Value> = serde_json::from_str(&text).ok();
            if let Ok(outlet) = from_bytes(text.as_bytes()) {
                let lenient = lenient.unwrap();
                prop_assert_eq!(outlet.reading.state == OutletState::Off, lenient["PowerState"] == "Off");
                prop_assert_eq!(outlet.reading.pending, lenient["PowerStateInTransition"] == true);
                prop_assert_eq!(outlet.reading.watts, lenient.pointer("/PowerWatts/Reading").and_then(Value::as_f64));
                prop_assert_eq!(outlet.reading.metered, lenient["PowerWatts"].is_object());
            }
        }
    }
}
