//! Templates are NHC's to read and the user's to write; coroner only reports whether one lacks the
//! annotation NHC needs to chain it with another coroner template.

use std::sync::Arc;

use jiff::Timestamp;
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};

use super::{Context, Error};
use crate::{
    api::{CoronerRemediationTemplate, conditions},
    contract,
    driver::ports::Events,
    fence::Notice,
};

const CONDITION: &str = "MultipleTemplatesSupport";

pub async fn reconcile(template: Arc<CoronerRemediationTemplate>, ctx: Arc<Context>) -> Result<Action, Error> {
    let supported = contract::supports_multiple_templates(&template.metadata);
    let mut status = template.status.clone().unwrap_or_default();
    let (state, reason, message) = if supported {
        (conditions::TRUE, "AnnotationPresent", format!("carries {}", contract::MULTIPLE_TEMPLATES_ANNOTATION))
    } else {
        (
            conditions::FALSE,
            "AnnotationMissing",
            format!(
                "lacks the annotation {}: \"true\"; NodeHealthCheck cannot put this template in an escalation chain with another coroner template",
                contract::MULTIPLE_TEMPLATES_ANNOTATION
            ),
        )
    };
    if !conditions::set(&mut status.conditions, CONDITION, state, reason, &message, Timestamp::now()) {
        return Ok(Action::await_change());
    }
    let api: Api<CoronerRemediationTemplate> = Api::namespaced(ctx.client.clone(), ctx.namespace());
    let patch = serde_json::json!({ "status": status });
    api.patch_status(&template.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    if !supported {
        let notice = Notice {
            warning: true,
            reason: crate::words::event::Event::MultipleTemplatesSupportMissing.as_str().into(),
            message,
        };
        ctx.publish(&template.object_ref(&()), &notice, "Validate").await;
    }
    Ok(Action::await_change())
}
