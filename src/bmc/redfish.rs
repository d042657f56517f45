//! Redfish over HTTPS (reqwest + rustls): Basic auth on every request (no sessions to leak), a
//! timeout per request, bounded retries for reads only, and redirects only within the same origin.

use std::{error::Error as StdError, time::Duration};

use reqwest::{Method, StatusCode, Url, redirect};
use serde_json::Value;

use super::{Bmc, BmcError, Credentials, PowerState, ResetType, SystemReading, tls};

/// Redfish resources are small; a BMC that streams more is misbehaving.
const MAX_BODY_BYTES: usize = 1 << 20;
const MAX_REDIRECTS: usize = 5;

#[derive(Clone, Debug)]
pub struct RedfishConfig {
    /// https URL of the service root; a bare `https://host[:port]` means `/redfish/v1`.
    pub endpoint: String,
    pub trust: tls::Trust,
    pub credentials: Credentials,
    pub request_timeout: Duration,
    /// Extra tries for a read after a transport error or a 5xx answer.
    pub read_retries: u32,
    /// Wait before the first retry; doubles each time.
    pub retry_backoff: Duration,
}

#[derive(Clone, Debug)]
pub struct RedfishClient {
    http: reqwest::Client,
    origin: Url,
    service_root: String,
    credentials: Credentials,
    read_retries: u32,
    retry_backoff: Duration,
}

impl RedfishClient {
    pub fn new(config: RedfishConfig) -> Result<Self, BmcError> {
        let endpoint = Url::parse(&config.endpoint)
            .map_err(|e| BmcError::Setup(format!("endpoint {:?}: {e}", config.endpoint)))?;
        if endpoint.scheme() != "https" || endpoint.host_str().is_none() {
            return Err(BmcError::Setup(format!("endpoint {:?} must be an https URL", config.endpoint)));
        }
        if !endpoint.username().is_empty() || endpoint.password().is_some() {
            // Credentials belong in the Secret; an endpoint is copied into status and Events.
            return Err(BmcError::Setup("the endpoint must not carry credentials (user@host)".into()));
        }
        let service_root = match endpoint.path().trim_end_matches('/') {
            "" => "/redfish/v1".to_owned(),
            path => path.to_owned(),
        };
        let tls = tls::client_config(&config.trust).map_err(|e| BmcError::Setup(e.to_string()))?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(config.request_timeout)
            .connect_timeout(config.request_timeout)
            .redirect(same_origin_redirects())
            .https_only(true)
            // A BMC sits on a management network: never send its credentials through a proxy.
            .no_proxy()
            .build()
            .map_err(|e| BmcError::Setup(e.to_string()))?;
        Ok(Self {
            http,
            origin: endpoint,
            service_root,
            credentials: config.credentials,
            read_retries: config.read_retries,
            retry_backoff: config.retry_backoff,
        })
    }

    /// scheme://host:port of the endpoint: the BMC's identity for rate limits and redirects.
    pub fn origin(&self) -> String {
        self.origin.origin().ascii_serialization()
    }

    /// A path on this BMC. Paths come from the BMC itself (members, reset targets): one that resolves
    /// to another origin would take the credentials, and a reset, elsewhere.
    fn url(&self, path: &str) -> Result<Url, BmcError> {
        let url = self.origin.join(path).map_err(|e| BmcError::Setup(format!("path {path:?}: {e}")))?;
        if url.origin() != self.origin.origin() {
            return Err(BmcError::Protocol { path: path.to_owned(), problem: "it points to another host".into() });
        }
        Ok(url)
    }

    fn system_path(&self, path_or_id: &str) -> String {
        if path_or_id.starts_with('/') {
            path_or_id.to_owned()
        } else {
            format!("{}/Systems/{path_or_id}", self.service_root)
        }
    }

    async fn get_json(&self, path: &str) -> Result<(String, Value), BmcError> {
        let mut attempt = 0;
        loop {
            match self.get_json_once(path).await {
                Err(e) if e.is_transient() && attempt < self.read_retries => {
                    tokio::time::sleep(self.retry_backoff * 2u32.saturating_pow(attempt)).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn get_json_once(&self, path: &str) -> Result<(String, Value), BmcError> {
        let response = self.send(Method::GET, path, None).await?;
        let final_path = response.url().path().to_owned();
        let body = read_body(response, path).await?;
        let value = serde_json::from_slice(&body)
            .map_err(|e| BmcError::Protocol { path: path.to_owned(), problem: format!("body is not JSON: {e}") })?;
        Ok((final_path, value))
    }

    async fn send(&self, method: Method, path: &str, body: Option<Value>) -> Result<reqwest::Response, BmcError> {
        let method_name = if method == Method::POST { "POST" } else { "GET" };
        let mut request = self
            .http
            .request(method, self.url(path)?)
            .basic_auth(&self.credentials.username, Some(self.credentials.password.reveal()))
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(classify)?;
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(BmcError::Unauthorized(status.as_u16()));
        }
        if !status.is_success() {
            let detail = read_body(response, path)
                .await
                .ok()
                .and_then(|b| redfish_message(&b))
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            return Err(BmcError::Status {
                method: method_name,
                path: path.to_owned(),
                status: status.as_u16(),
                detail,
            });
        }
        Ok(response)
    }
}

impl Bmc for RedfishClient {
    async fn systems(&self) -> Result<Vec<String>, BmcError> {
        let path = format!("{}/Systems", self.service_root);
        let (_, collection) = self.get_json(&path).await?;
        let members = collection
            .get("Members")
            .and_then(Value::as_array)
            .ok_or_else(|| BmcError::Protocol { path: path.clone(), problem: "no Members array".into() })?;
        members
            .iter()
            .map(|m| {
                m.get("@odata.id").and_then(Value::as_str).map(str::to_owned).ok_or_else(|| BmcError::Protocol {
                    path: path.clone(),
                    problem: "a member has no @odata.id".into(),
                })
            })
            .collect()
    }

    async fn system(&self, path_or_id: &str) -> Result<SystemReading, BmcError> {
        let path = self.system_path(path_or_id);
        let (final_path, system) = self.get_json(&path).await?;
        parse_system(&final_path, &system)
    }

    async fn reset(&self, system: &SystemReading, reset: ResetType) -> Result<u16, BmcError> {
        let target =
            system.reset_target.clone().unwrap_or_else(|| format!("{}/Actions/ComputerSystem.Reset", system.path));
        // The reset must act on the system whose identity was proven, not a sibling.
        if !below(&self.url(&system.path)?, &self.url(&target)?) {
            return Err(BmcError::Protocol {
                path: system.path.clone(),
                problem: format!("its reset target {target:?} is not below the system"),
            });
        }
        let response =
            self.send(Method::POST, &target, Some(serde_json::json!({ "ResetType": reset.as_str() }))).await?;
        Ok(response.status().as_u16())
    }
}

/// Reads the fields the fence relies on. Unknown fields are ignored; a missing or malformed `UUID` or
/// `PowerState` is an error, never a default.
fn parse_system(path: &str, system: &Value) -> Result<SystemReading, BmcError> {
    let problem = |problem: &str| BmcError::Protocol { path: path.to_owned(), problem: problem.to_owned() };
    let uuid = system.get("UUID").and_then(Value::as_str).ok_or_else(|| problem("no UUID string"))?;
    if crate::identity::parse(uuid).is_none() {
        return Err(problem(&format!("UUID {uuid:?} is not a UUID")));
    }
    let power = system.get("PowerState").and_then(Value::as_str).ok_or_else(|| problem("no PowerState string"))?;
    let id = system
        .get("Id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| path.trim_end_matches('/').rsplit('/').next().unwrap_or_default().to_owned());
    let reset_target =
        system.pointer("/Actions/#ComputerSystem.Reset/target").and_then(Value::as_str).map(str::to_owned);
    Ok(SystemReading {
        id,
        path: path.to_owned(),
        uuid: uuid.to_owned(),
        power_state: PowerState::parse(power),
        reset_target,
    })
}

/// Whether `target` lies below `system`, compared as the server will see them: after `..` and
/// `%2e%2e` segments are resolved, so `Systems/1/../2/...` is not below `Systems/1`.
fn below(system: &Url, target: &Url) -> bool {
    target.path().starts_with(&format!("{}/", system.path().trim_end_matches('/')))
}

fn same_origin_redirects() -> redirect::Policy {
    redirect::Policy::custom(|attempt| {
        let same_origin = attempt.previous().last().is_some_and(|previous| previous.origin() == attempt.url().origin());
        if !same_origin {
            let target = attempt.url().origin().ascii_serialization();
            attempt.error(CrossOrigin(target))
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(TooManyRedirects)
        } else {
            attempt.follow()
        }
    })
}

#[derive(Debug, thiserror::Error)]
#[error("redirect to {0}")]
struct CrossOrigin(String);

#[derive(Debug, thiserror::Error)]
#[error("more than {MAX_REDIRECTS} redirects")]
struct TooManyRedirects;

async fn read_body(mut response: reqwest::Response, path: &str) -> Result<Vec<u8>, BmcError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(classify)? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(BmcError::Protocol {
                path: path.to_owned(),
                problem: format!("body larger than {MAX_BODY_BYTES} bytes"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The human part of a Redfish error body, bounded so a BMC cannot flood status or Events.
fn redfish_message(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let error = value.get("error")?;
    let message =
        error.pointer("/@Message.ExtendedInfo/0/Message").or_else(|| error.get("message")).and_then(Value::as_str)?;
    Some(message.chars().take(200).collect())
}

fn classify(error: reqwest::Error) -> BmcError {
    if let Some(cross) = find_source::<CrossOrigin>(&error) {
        return BmcError::CrossHostRedirect(cross.0.clone());
    }
    if let Some(rustls_error) = find_rustls_error(&error) {
        return BmcError::Tls(tls::describe(rustls_error));
    }
    if error.is_timeout() {
        return BmcError::Unreachable("no answer before the request timeout".into());
    }
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    BmcError::Unreachable(text)
}

fn find_source<'a, E: StdError + 'static>(error: &'a (dyn StdError + 'static)) -> Option<&'a E> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        current = e.source();
    }
    None
}

/// rustls errors reach us wrapped in io::Errors (nested), whose `source()` skips the wrapped error.
fn find_rustls_error<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        current = match e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn StdError + 'static)),
            None => e.source(),
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_system_needs_uuid_and_power_state() {
        let ok = json!({"Id": "abc", "UUID": "7f3b0c1e-0000-4000-8000-000000000001", "PowerState": "On", "Oem": {"x": 1},
            "Actions": {"#ComputerSystem.Reset": {"target": "/redfish/v1/Systems/abc/Actions/ComputerSystem.Reset"}}});
        let reading = parse_system("/redfish/v1/Systems/abc", &ok).unwrap();
        assert_eq!(reading.power_state, PowerState::On);
        assert_eq!(reading.reset_target.as_deref(), Some("/redfish/v1/Systems/abc/Actions/ComputerSystem.Reset"));

        for broken in [
            json!({"Id": "abc", "PowerState": "On"}),
            json!({"Id": "abc", "UUID": "", "PowerState": "On"}),
            json!({"Id": "abc", "UUID": "nope", "PowerState": "On"}),
            json!({"Id": "abc", "UUID": "7f3b0c1e-0000-4000-8000-000000000001"}),
            json!({"Id": "abc", "UUID": "7f3b0c1e-0000-4000-8000-000000000001", "PowerState": null}),
            json!({"Id": "abc", "UUID": 7, "PowerState": "On"}),
        ] {
            assert!(matches!(parse_system("/p", &broken), Err(BmcError::Protocol { .. })), "{broken}");
        }
    }

    fn client_config() -> RedfishConfig {
        RedfishConfig {
            endpoint: "https://10.0.0.1".into(),
            trust: tls::Trust { insecure_skip_verify: true, ..tls::Trust::default() },
            credentials: Credentials { username: "u".into(), password: crate::bmc::Password::new("p".into()) },
            request_timeout: Duration::from_secs(1),
            read_retries: 0,
            retry_backoff: Duration::from_millis(1),
        }
    }

    fn client() -> RedfishClient {
        RedfishClient::new(RedfishConfig { endpoint: "https://10.0.0.1:8443/redfish/v1".into(), ..client_config() })
            .unwrap()
    }

    #[test]
    fn paths_from_the_bmc_stay_on_its_origin() {
        let bmc = client();
        assert!(bmc.url("/redfish/v1/Systems/1").is_ok());
        for elsewhere in [
            "https://other:8443/redfish/v1/Systems/1",
            "//other/redfish/v1",
            "http://10.0.0.1:8443/redfish/v1",
            "https://10.0.0.1:9443/x",
        ] {
            assert!(matches!(bmc.url(elsewhere), Err(BmcError::Protocol { .. })), "{elsewhere}");
        }
    }

    #[tokio::test]
    async fn a_reset_target_outside_the_system_is_refused_before_sending() {
        let system = SystemReading {
            id: "1".into(),
            path: "/redfish/v1/Systems/1".into(),
            uuid: "7f3b0c1e-0000-4000-8000-000000000001".into(),
            power_state: PowerState::On,
            reset_target: Some("/redfish/v1/Systems/2/Actions/ComputerSystem.Reset".into()),
        };
        let error = client().reset(&system, ResetType::ForceOff).await.unwrap_err();
        assert!(matches!(error, BmcError::Protocol { .. }), "{error:?}");
    }

    #[test]
    fn a_reset_target_is_below_its_system_only_after_dot_segments_are_resolved() {
        let bmc = client();
        let system = bmc.url("/redfish/v1/Systems/1").unwrap();
        let below_system = |target: &str| below(&system, &bmc.url(target).unwrap());
        assert!(below_system("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"));
        assert!(below_system("https://10.0.0.1:8443/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"));
        for sibling in [
            "/redfish/v1/Systems/2/Actions/ComputerSystem.Reset",
            "/redfish/v1/Systems/1/../2/Actions/ComputerSystem.Reset",
            "/redfish/v1/Systems/1/%2e%2e/2/Actions/ComputerSystem.Reset",
            "/redfish/v1/Systems/10/Actions/ComputerSystem.Reset",
            "/redfish/v1/Systems/1",
        ] {
            assert!(!below_system(sibling), "{sibling}");
        }
    }

    #[test]
    fn an_endpoint_with_credentials_is_refused() {
        let config = RedfishConfig { endpoint: "https://admin:secret@10.0.0.1/redfish/v1".into(), ..client_config() };
        let error = RedfishClient::new(config).unwrap_err();
        assert!(!error.to_string().contains("secret"));
    }

    #[test]
    fn error_messages_are_bounded() {
        let long = "x".repeat(5000);
        let body = serde_json::to_vec(&json!({"error": {"message": long}})).unwrap();
        assert_eq!(redfish_message(&body).unwrap().len(), 200);
        let extended =
            serde_json::to_vec(&json!({"error": {"@Message.ExtendedInfo": [{"Message": "power off disabled"}]}}))
                .unwrap();
        assert_eq!(redfish_message(&extended).as_deref(), Some("power off disabled"));
    }
}
