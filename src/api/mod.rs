//! The `coroner.dev/v1alpha1` API: custom resource types, their defaults and condition helpers.

mod attestation;
mod binding;
pub mod conditions;
mod duration;
mod remediation;
mod verification;

pub use attestation::*;
pub use binding::*;
pub use duration::{Duration, ParseDurationError};
pub use remediation::*;
pub use verification::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub const GROUP: &str = "coroner.dev";

/// On each CRD: the revision of the schemas it serves. An older structural schema silently prunes
/// the fields a newer coroner writes (the records its safety rules rest on), so coroner acts on
/// nothing until every CRD carries at least [`SCHEMA_REVISION`] (`crd_outdated`).
pub const SCHEMA_REVISION_ANNOTATION: &str = "coroner.dev/schema-revision";
/// Raised whenever a field a safety rule reads is added to a CRD.
pub const SCHEMA_REVISION: u32 = 5;

/// Every CRD coroner serves, in a stable order, each marked with [`SCHEMA_REVISION`].
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![
        CoronerRemediation::crd(),
        CoronerRemediationTemplate::crd(),
        BmcBinding::crd(),
        CoronerAttestation::crd(),
        CoronerVerification::crd(),
    ];
    for crd in &mut crds {
        crd.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(SCHEMA_REVISION_ANNOTATION.into(), SCHEMA_REVISION.to_string());
    }
    crds
}

/// Why the served CRDs are older than this coroner needs (missing, or a revision below
/// [`SCHEMA_REVISION`]), or `None` when every one is recent enough. `served`: each CRD's name and
/// its annotations, `None` for a CRD that is not there.
pub fn crd_outdated<'a>(
    served: impl IntoIterator<Item = (&'a str, Option<&'a std::collections::BTreeMap<String, String>>)>,
) -> Option<String> {
    let problems: Vec<String> = served
        .into_iter()
        .filter_map(|(name, annotations)| {
            let Some(annotations) = annotations else { return Some(format!("{name} is not installed")) };
            let revision = annotations.get(SCHEMA_REVISION_ANNOTATION).and_then(|r| r.parse::<u32>().ok());
            match revision {
                Some(r) if r >= SCHEMA_REVISION => None,
                Some(r) => Some(format!("{name} has schema revision {r}")),
                None => Some(format!("{name} has no {SCHEMA_REVISION_ANNOTATION}")),
            }
        })
        .collect();
    (!problems.is_empty()).then(|| {
        format!(
            "{}; this coroner needs revision {SCHEMA_REVISION}: apply its CRDs first (kubectl apply -f crds/coroner.yaml; Helm never upgrades crds/), docs/install.md",
            problems.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coroner_acts_on_nothing_until_every_crd_carries_its_schema_revision() {
        let current: std::collections::BTreeMap<String, String> =
            [(SCHEMA_REVISION_ANNOTATION.to_owned(), SCHEMA_REVISION.to_string())].into();
        let old: std::collections::BTreeMap<String, String> =
            [(SCHEMA_REVISION_ANNOTATION.to_owned(), "1".to_owned())].into();
        let none = std::collections::BTreeMap::new();
        assert_eq!(crd_outdated([("a.coroner.dev", Some(&current))]), None);
        let why = crd_outdated([("a.coroner.dev", Some(&current)), ("b.coroner.dev", Some(&old))]).unwrap();
        assert!(
            why.starts_with("b.coroner.dev has schema revision 1") && why.contains("apply its CRDs first"),
            "{why}"
        );
        assert!(crd_outdated([("c.coroner.dev", Some(&none))]).unwrap().contains("has no"));
        assert!(crd_outdated([("d.coroner.dev", None)]).unwrap().contains("is not installed"));
        // What `coroner crd` prints carries it.
        assert!(crds().iter().all(|c| crd_outdated([("x", c.metadata.annotations.as_ref())]).is_none()));
    }
}
