#!/usr/bin/env bash
# Copies the generated CRDs (crds/coroner.yaml, from `coroner crd`) to where the chart and the OLM
# bundle need them: charts/coroner/crds/coroner.yaml as is, and one file per CRD in bundle/manifests
# (the bundle loader reads one object per file), named <group>_<plural>.yaml as operator-sdk does.
# tests/install.rs fails when these copies differ from crds/coroner.yaml.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/crds/coroner.yaml

cp "$src" "$root/charts/coroner/crds/coroner.yaml"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Split on the document markers; the marker line itself is dropped.
awk -v dir="$tmp" '/^---$/ { n++; next } { print > (dir "/" n ".yaml") }' "$src"
rm -f "$root"/bundle/manifests/coroner.dev_*.yaml
for doc in "$tmp"/*.yaml; do
  name=$(awk '/^metadata:/ { m = 1; next } m && /^  name: / { print $2; exit }' "$doc")
  [[ -n $name ]] || { echo "no metadata.name in a document of $src" >&2; exit 1; }
  cp "$doc" "$root/bundle/manifests/${name#*.}_${name%%.*}.yaml"
done
