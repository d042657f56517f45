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

/// Every CRD coroner serves, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        CoronerRemediation::crd(),
        CoronerRemediationTemplate::crd(),
        BmcBinding::crd(),
        CoronerAttestation::crd(),
        CoronerVerification::crd(),
    ]
}
