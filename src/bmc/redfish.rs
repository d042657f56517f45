//! Redfish over HTTPS (reqwest + rustls): Basic auth on every request (no sessions to leak), a
//! timeout per request, bounded retries for reads only. Redirects: a reset never follows one; a read
//! follows same-origin redirects only while discovering systems (coroner follows them itself, so the
//! rule is per request, not per client); a redirect to another origin is always refused.

use std::{collections::HashSet, error::Error as StdError, time::Duration};

use reqwest::{Method, StatusCode, Url, header, redirect};
use serde_json::Value;

use super::{
    Bmc, BmcError, Credentials, MAX_MESSAGE_CHARS, MAX_VALUE_CHARS, PowerState, ResetType, SetupError, SystemReading,
    bounded, json,
    paths::{self, PathProblem},
    tls,
};

/// Redfish resources are small; a BMC that streams more is misbehaving.
const MAX_BODY_BYTES: usize = 1 << 20;
const MAX_REDIRECTS: usize = 5;
/// Bounds on a Systems collection: enough for a chassis manager with dozens of blades.
const MAX_PAGES: usize = 64;
const MAX_MEMBERS: usize = 256;
/// The longest system `Id` accepted; it goes into status as `systemId`.
const MAX_ID_CHARS: usize = 128;
/// How much of a BMC-supplied path an error message shows.
const SHOWN_PATH_CHARS: usize = 160;

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
    request_timeout: Duration,
    service_root: String,
    credentials: Credentials,
    read_retries: u32,
    retry_backoff: Duration,
}

/// Whether a GET may follow a same-origin redirect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Redirects {
    /// Discovery: the system that answers is the one found.
    Follow,
    /// A fence read: the system is read where discovery found it.
    Refuse,
}

/// A path or URL from the BMC, or one built from it, as an error message may show it.
fn shown(path: &str) -> String {
    bounded(&paths::without_userinfo(path), SHOWN_PATH_CHARS)
}

fn protocol(path: &str, problem: impl Into<String>) -> BmcError {
    BmcError::Protocol { path: shown(path), problem: problem.into() }
}

impl RedfishClient {
    pub fn new(config: RedfishConfig) -> Result<Self, SetupError> {
        // Every message here names the endpoint without its userinfo: it goes into status and Events.
        let named = paths::without_userinfo(&config.endpoint);
        let endpoint =
            Url::parse(&config.endpoint).map_err(|e| SetupError::Endpoint(format!("endpoint {named:?}: {e}")))?;
        if !endpoint.username().is_empty() || endpoint.password().is_some() {
            // Credentials belong in the Secret; an endpoint is copied into status and Events.
            return Err(SetupError::Endpoint("the endpoint must not carry credentials (user@host)".into()));
        }
        if endpoint.scheme() != "https" || endpoint.host_str().is_none() {
            return Err(SetupError::Endpoint(format!("endpoint {named:?} must be an https URL")));
        }
        let service_root = match endpoint.path().trim_end_matches('/') {
            "" => "/redfish/v1".to_owned(),
            path => path.to_owned(),
        };
        let tls = tls::client_config(&config.trust).map_err(SetupError::Tls)?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(config.request_timeout)
            .connect_timeout(config.request_timeout)
            .redirect(no_redirects())
            .https_only(true)
            // A BMC sits on a management network: never send its credentials through a proxy.
            .no_proxy()
            .build()
            .map_err(|e| SetupError::Http(e.to_string()))?;
        Ok(Self {
            http,
            origin: endpoint,
            request_timeout: config.request_timeout,
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
    pub(crate) fn url(&self, path: &str) -> Result<Url, BmcError> {
        paths::resolve(&self.origin, path).map_err(|problem| protocol(path, problem.to_string()))
    }

    /// `Systems/{id}` for an id (the binding's pin, validated as one path segment), or the path itself.
    fn system_path(&self, path_or_id: &str) -> Result<String, BmcError> {
        if path_or_id.starts_with('/') {
            return Ok(path_or_id.to_owned());
        }
        match paths::segments(&format!("/{path_or_id}")) {
            Ok(segments) if segments.len() == 1 => Ok(format!("{}/Systems/{path_or_id}", self.service_root)),
            _ => Err(BmcError::Setup(format!("systemId {:?} is not one path segment", bounded(path_or_id, 64)))),
        }
    }

    /// The service root's path (`/redfish/v1`), under which resources are addressed by id.
    pub(crate) fn service_root(&self) -> &str {
        &self.service_root
    }

    /// A resource read where it is asked for (no redirect followed), as strict JSON: the plumbing other
    /// Redfish devices (PDU outlets) share with the BMC client.
    pub(crate) async fn read(&self, path: &str) -> Result<Value, BmcError> {
        let (_, body) = self.get(path, Redirects::Refuse).await?;
        decode(path, &body)
    }

    /// One action POST to a target on this origin (`what` names it in errors), never retried and never
    /// redirected. Returns the HTTP status.
    pub(crate) async fn post(&self, target_url: Url, target: &str, body: Value, what: &str) -> Result<u16, BmcError> {
        let response = self.send(Method::POST, target_url, target, Some(body)).await?;
        let status = response.status();
        if status.is_redirection() {
            let to = location(&response).map_or_else(|| "nowhere".to_owned(), |l| shown(&l));
            return Err(protocol(
                target,
                format!(
                    "it answered {what} with HTTP {} (a redirect to {to}); an action never follows a redirect",
                    status.as_u16()
                ),
            ));
        }
        Ok(status.as_u16())
    }

    async fn read_system(&self, path_or_id: &str, redirects: Redirects) -> Result<SystemReading, BmcError> {
        let path = self.system_path(path_or_id)?;
        let (answered, body) = self.get(&path, redirects).await?;
        parse_system(&self.origin, &answered, &decode(&path, &body)?)
    }

    /// A GET with the read retries; returns where it was answered and the body.
    async fn get(&self, path: &str, redirects: Redirects) -> Result<(Url, Vec<u8>), BmcError> {
        let mut attempt = 0;
        loop {
            match self.get_once(path, redirects).await {
                Err(e) if e.is_transient() && attempt < self.read_retries => {
                    tokio::time::sleep(self.retry_backoff * 2u32.saturating_pow(attempt)).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn get_once(&self, path: &str, redirects: Redirects) -> Result<(Url, Vec<u8>), BmcError> {
        let mut url = self.url(path)?;
        for hop in 0..=MAX_REDIRECTS {
            let response = self.send(Method::GET, url.clone(), path, None).await?;
            let status = response.status();
            if !status.is_redirection() {
                return Ok((url, read_body(response, path).await?));
            }
            let Some(location) = location(&response) else {
                return Err(protocol(path, format!("it answered HTTP {} without a Location", status.as_u16())));
            };
            if redirects == Redirects::Refuse {
                return Err(protocol(
                    path,
                    format!(
                        "it answered HTTP {} (a redirect to {}); a fence reads the system where discovery found it and follows no redirect",
                        status.as_u16(),
                        shown(&location)
                    ),
                ));
            }
            if hop == MAX_REDIRECTS {
                break;
            }
            url = paths::resolve(&url, &location).map_err(|problem| match problem {
                PathProblem::OtherOrigin(origin) => BmcError::CrossHostRedirect(origin),
                problem => protocol(&location, format!("a redirect to it: {problem}")),
            })?;
        }
        Err(protocol(path, format!("more than {MAX_REDIRECTS} redirects")))
    }

    /// One request; a success or a redirect comes back as the response, anything else as an error.
    async fn send(
        &self,
        method: Method,
        url: Url,
        path: &str,
        body: Option<Value>,
    ) -> Result<reqwest::Response, BmcError> {
        let method_name = if method == Method::POST { "POST" } else { "GET" };
        let mut request = self
            .http
            .request(method, url)
            .basic_auth(&self.credentials.username, Some(self.credentials.password.reveal()))
            .header(header::ACCEPT, "application/json");
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(classify)?;
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(BmcError::Unauthorized(status.as_u16()));
        }
        if status.is_success() || status.is_redirection() {
            return Ok(response);
        }
        let detail = read_body(response, path)
            .await
            .ok()
            .and_then(|b| redfish_message(&b))
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        Err(BmcError::Status { method: method_name, path: shown(path), status: status.as_u16(), detail })
    }
}

impl Bmc for RedfishClient {
    fn origin(&self) -> String {
        RedfishClient::origin(self)
    }

    async fn systems(&self) -> Result<Vec<String>, BmcError> {
        let collection_path = format!("{}/Systems", self.service_root);
        let mut next = Some(collection_path.clone());
        let mut visited = HashSet::new();
        let mut members = Vec::new();
        let mut count = None;
        while let Some(page) = next.take() {
            if !visited.insert(self.url(&page)?) {
                return Err(protocol(&page, "Members@odata.nextLink leads back to a page already read"));
            }
            if visited.len() > MAX_PAGES {
                return Err(protocol(&collection_path, format!("the collection has more than {MAX_PAGES} pages")));
            }
            let (_, body) = self.get(&page, Redirects::Follow).await?;
            let collection = parse_collection(&self.origin, &page, &decode(&page, &body)?)?;
            if visited.len() == 1 {
                count = collection.count;
            }
            members.extend(collection.members);
            if members.len() > MAX_MEMBERS {
                return Err(protocol(&collection_path, format!("the collection has more than {MAX_MEMBERS} members")));
            }
            next = collection.next;
        }
        if let Some(count) = count.filter(|count| *count != members.len() as u64) {
            return Err(protocol(
                &collection_path,
                format!("Members@odata.count says {count} members, its pages list {}", members.len()),
            ));
        }
        let mut seen = HashSet::new();
        members.retain(|m| seen.insert(m.clone()));
        Ok(members)
    }

    async fn discover_system(&self, path_or_id: &str) -> Result<SystemReading, BmcError> {
        self.read_system(path_or_id, Redirects::Follow).await
    }

    async fn system(&self, path_or_id: &str) -> Result<SystemReading, BmcError> {
        self.read_system(path_or_id, Redirects::Refuse).await
    }

    async fn reset(&self, system: &SystemReading, reset: ResetType) -> Result<u16, BmcError> {
        let target = system
            .reset_target
            .clone()
            .unwrap_or_else(|| format!("{}/Actions/ComputerSystem.Reset", system.path.trim_end_matches('/')));
        // The reset must act on the system whose identity was proven, not a sibling.
        let (system_url, target_url) = (self.url(&system.path)?, self.url(&target)?);
        if !paths::below(system_url.path(), target_url.path()) {
            return Err(protocol(
                &system.path,
                format!("its reset target {:?} is not below the system", shown(&target)),
            ));
        }
        let body = serde_json::json!({ "ResetType": reset.as_str() });
        self.post(target_url, &target, body, &format!("the {} reset", reset.as_str())).await
    }

    /// A TCP connection to every address of the endpoint at once, the name's lookup and the
    /// connections within one request timeout: a handshake or a refusal from any address is an answer;
    /// silence only when every address gave no route or no answer.
    async fn heard(&self) -> super::Heard {
        use std::io::ErrorKind::{
            ConnectionAborted, ConnectionRefused, ConnectionReset, HostUnreachable, NetworkUnreachable, TimedOut,
        };

        use futures::stream::{FuturesUnordered, StreamExt};

        use super::Heard;
        let Some(host) = self.origin.host_str() else { return Heard::NotAsked("the endpoint names no host".into()) };
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        let port = self.origin.port_or_known_default().unwrap_or(443);
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        let addresses = match tokio::time::timeout_at(deadline, tokio::net::lookup_host((host.as_str(), port))).await {
            Ok(Ok(addresses)) => addresses.collect::<Vec<_>>(),
            Ok(Err(error)) => return Heard::NotAsked(format!("{host} does not resolve: {error}")),
            Err(_) => return Heard::NotAsked(format!("{host} did not resolve within the request timeout")),
        };
        let mut connecting: FuturesUnordered<_> = addresses
            .into_iter()
            .map(|address| async move { (address, tokio::net::TcpStream::connect(address).await) })
            .collect();
        let mut unasked = None;
        // Until the deadline: whatever is still connecting then heard nothing.
        while let Ok(Some((address, connected))) = tokio::time::timeout_at(deadline, connecting.next()).await {
            match connected {
                Ok(_) => return Heard::Answered,
                Err(error) if matches!(error.kind(), ConnectionRefused | ConnectionReset | ConnectionAborted) => {
                    return Heard::Answered;
                }
                Err(error) if matches!(error.kind(), HostUnreachable | NetworkUnreachable | TimedOut) => {}
                Err(error) => {
                    unasked.get_or_insert_with(|| format!("no connection to {address}: {error}"));
                }
            }
        }
        unasked.map_or(Heard::Silent, Heard::NotAsked)
    }
}

fn location(response: &reqwest::Response) -> Option<String> {
    response.headers().get(header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// A body as JSON, refused when it is not JSON or repeats a key in one object ([`json::parse`]).
fn decode(path: &str, body: &[u8]) -> Result<Value, BmcError> {
    json::parse(body)
        .map_err(|e| protocol(path, format!("body is not usable JSON: {}", bounded(&e.to_string(), MAX_MESSAGE_CHARS))))
}

/// One page of a Systems collection.
#[derive(Debug, PartialEq)]
struct CollectionPage {
    /// Member paths, resolved on the endpoint's origin.
    members: Vec<String>,
    /// `Members@odata.count`: the members of all pages.
    count: Option<u64>,
    next: Option<String>,
}

fn parse_collection(origin: &Url, page: &str, collection: &Value) -> Result<CollectionPage, BmcError> {
    let members = collection
        .get("Members")
        .and_then(Value::as_array)
        .ok_or_else(|| protocol(page, "no Members array"))?
        .iter()
        .map(|m| {
            let id = m
                .get("@odata.id")
                .and_then(Value::as_str)
                .ok_or_else(|| protocol(page, "a member has no @odata.id"))?;
            let url = paths::resolve(origin, id)
                .map_err(|problem| protocol(page, format!("member {:?}: {problem}", shown(id))))?;
            if url.query().is_some() || url.fragment().is_some() {
                return Err(protocol(page, format!("member {:?} has a query or fragment", shown(id))));
            }
            Ok(url.path().to_owned())
        })
        .collect::<Result<_, _>>()?;
    let count = match collection.get("Members@odata.count") {
        None | Some(Value::Null) => None,
        Some(count) => Some(count.as_u64().ok_or_else(|| protocol(page, "Members@odata.count is not a count"))?),
    };
    let next = match collection.get("Members@odata.nextLink") {
        None | Some(Value::Null) => None,
        Some(Value::String(link)) => Some(link.clone()),
        Some(_) => return Err(protocol(page, "Members@odata.nextLink is not a string")),
    };
    Ok(CollectionPage { members, count, next })
}

/// Reads the fields the fence relies on, from a system answered at `answered`. Unknown fields are
/// ignored; a missing or malformed `UUID` or `PowerState` is an error, never a default. The system
/// must name itself (`@odata.id`) where it answered, and every string kept is bounded: refused when it
/// is used to address the BMC (paths, `Id`), [`bounded`] when it is only shown.
fn parse_system(origin: &Url, answered: &Url, system: &Value) -> Result<SystemReading, BmcError> {
    let at = answered.path();
    let problem = |problem: String| protocol(at, problem);
    let uuid = system.get("UUID").and_then(Value::as_str).ok_or_else(|| problem("no UUID string".into()))?.trim();
    if crate::words::uuid::parse(uuid).is_none() {
        return Err(problem(format!("UUID {:?} is not a UUID", bounded(uuid, MAX_VALUE_CHARS))));
    }
    let power =
        system.get("PowerState").and_then(Value::as_str).ok_or_else(|| problem("no PowerState string".into()))?;
    let path = match system.get("@odata.id") {
        None => at.to_owned(),
        Some(Value::String(id)) => {
            let named =
                paths::resolve(origin, id).map_err(|p| problem(format!("its @odata.id {:?}: {p}", shown(id))))?;
            if !paths::same_resource(named.path(), at) {
                return Err(problem(format!("it names itself {:?}, not where it answered", shown(id))));
            }
            named.path().to_owned()
        }
        Some(_) => return Err(problem("@odata.id is not a string".into())),
    };
    let id = match system.get("Id") {
        None => paths::segments(&path).ok().and_then(|s| s.last().cloned()).unwrap_or_default(),
        Some(Value::String(id)) if id.chars().count() <= MAX_ID_CHARS && bounded(id, MAX_ID_CHARS) == *id => id.clone(),
        Some(Value::String(id)) => {
            return Err(problem(format!("its Id {:?} is not a usable identifier", bounded(id, MAX_VALUE_CHARS))));
        }
        Some(_) => return Err(problem("Id is not a string".into())),
    };
    let reset_target = match system.pointer("/Actions/#ComputerSystem.Reset/target") {
        None => None,
        Some(Value::String(target)) => {
            let url = paths::resolve(origin, target)
                .map_err(|p| problem(format!("its reset target {:?}: {p}", shown(target))))?;
            if url.query().is_some() || url.fragment().is_some() {
                return Err(problem(format!("its reset target {:?} has a query or fragment", shown(target))));
            }
            Some(url.path().to_owned())
        }
        Some(_) => return Err(problem("the reset target is not a string".into())),
    };
    let state = match system.pointer("/Status/State") {
        None | Some(Value::Null) => None,
        Some(Value::String(state)) => Some(state.as_str()),
        Some(_) => return Err(problem("Status.State is not a string".into())),
    };
    Ok(SystemReading {
        id,
        path,
        uuid: uuid.to_owned(),
        power_state: PowerState::with_state(power, state),
        reset_target,
        aliases: Vec::new(),
    })
}

/// Redirects are never followed by the HTTP client: a same-origin one comes back as the answer (for
/// discovery to follow, or for a fence read and a reset to refuse), one to another origin is an error
/// at once, before anything reaches that origin.
fn no_redirects() -> redirect::Policy {
    redirect::Policy::custom(|attempt| {
        let same_origin = attempt.previous().last().is_some_and(|previous| previous.origin() == attempt.url().origin());
        if same_origin {
            attempt.stop()
        } else {
            let target = bounded(&attempt.url().origin().ascii_serialization(), 256);
            attempt.error(CrossOrigin(target))
        }
    })
}

#[derive(Debug, thiserror::Error)]
#[error("redirect to {0}")]
struct CrossOrigin(String);

async fn read_body(mut response: reqwest::Response, path: &str) -> Result<Vec<u8>, BmcError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(classify)? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(protocol(path, format!("body larger than {MAX_BODY_BYTES} bytes")));
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
    Some(bounded(message, MAX_MESSAGE_CHARS))
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
    // A connection that never came about sent nothing (a reset's request never left).
    if error.is_connect() { BmcError::Unconnected(text) } else { BmcError::Unreachable(text) }
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
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    const UUID: &str = "7f3b0c1e-0000-4000-8000-000000000001";

    fn origin() -> Url {
        Url::parse("https://10.0.0.1:8443/redfish/v1").unwrap()
    }

    fn at(path: &str) -> Url {
        origin().join(path).unwrap()
    }

    fn system(body: &Value) -> Result<SystemReading, BmcError> {
        parse_system(&origin(), &at("/redfish/v1/Systems/abc"), body)
    }

    #[test]
    fn a_system_needs_uuid_and_power_state() {
        let ok = json!({"@odata.id": "/redfish/v1/Systems/abc", "Id": "abc", "UUID": UUID, "PowerState": "On", "Oem": {"x": 1},
            "Actions": {"#ComputerSystem.Reset": {"target": "/redfish/v1/Systems/abc/Actions/ComputerSystem.Reset"}}});
        let reading = system(&ok).unwrap();
        assert_eq!(reading.power_state, PowerState::On);
        assert_eq!(reading.path, "/redfish/v1/Systems/abc");
        assert_eq!(reading.reset_target.as_deref(), Some("/redfish/v1/Systems/abc/Actions/ComputerSystem.Reset"));

        for broken in [
            json!({"Id": "abc", "PowerState": "On"}),
            json!({"Id": "abc", "UUID": "", "PowerState": "On"}),
            json!({"Id": "abc", "UUID": "nope", "PowerState": "On"}),
            json!({"Id": "abc", "UUID": UUID}),
            json!({"Id": "abc", "UUID": UUID, "PowerState": null}),
            json!({"Id": "abc", "UUID": 7, "PowerState": "On"}),
        ] {
            assert!(matches!(system(&broken), Err(BmcError::Protocol { .. })), "{broken}");
        }
    }

    #[test]
    fn an_off_system_whose_status_state_says_the_bmc_does_not_know_it_does_not_read_off() {
        let with_state = |state: Value| system(&json!({"UUID": UUID, "PowerState": "Off", "Status": {"State": state}}));
        assert_eq!(with_state(json!("Enabled")).unwrap().power_state, PowerState::Off);
        assert_eq!(with_state(Value::Null).unwrap().power_state, PowerState::Off);
        assert_eq!(with_state(json!("Absent")).unwrap().power_state, PowerState::OffUnknown("Absent".into()));
        assert!(matches!(with_state(json!(3)), Err(BmcError::Protocol { .. })));
    }

    #[test]
    fn a_system_is_the_one_that_answered_and_must_name_itself_there() {
        let named = |id: &str| json!({"@odata.id": id, "UUID": UUID, "PowerState": "Off"});
        // Without an Id, the last decoded segment of where it answered.
        let reading = system(&json!({"UUID": UUID, "PowerState": "Off"})).unwrap();
        assert_eq!((reading.id.as_str(), reading.path.as_str()), ("abc", "/redfish/v1/Systems/abc"));
        assert_eq!(system(&named("/redfish/v1/Systems/abc/")).unwrap().path, "/redfish/v1/Systems/abc/");
        for elsewhere in [
            "/redfish/v1/Systems/other",
            "/redfish/v1/Systems/abc/../other",
            "https://other/redfish/v1/Systems/abc",
            "/redfish/v1/Systems/abc%2f..%2fother",
        ] {
            assert!(matches!(system(&named(elsewhere)), Err(BmcError::Protocol { .. })), "{elsewhere}");
        }
    }

    #[test]
    fn strings_that_address_the_bmc_are_refused_when_unusable_and_the_rest_is_bounded() {
        let with = |field: &str, value: Value| {
            let mut body = json!({"Id": "abc", "UUID": UUID, "PowerState": "On"});
            body[field] = value;
            system(&body)
        };
        assert!(with("Id", json!("a\u{1b}[2Jb")).is_err());
        assert!(with("Id", json!("x".repeat(MAX_ID_CHARS + 1))).is_err());
        assert_eq!(with("Id", json!("x".repeat(MAX_ID_CHARS))).unwrap().id.len(), MAX_ID_CHARS);
        let PowerState::Other(shown) = with("PowerState", json!("z".repeat(5000))).unwrap().power_state else {
            panic!("not Other")
        };
        assert_eq!(shown.chars().count(), MAX_VALUE_CHARS);
        let padded = with("UUID", json!(format!("{}{UUID}", " ".repeat(5000)))).unwrap();
        assert_eq!(padded.uuid, UUID, "the UUID is kept trimmed");
        let error = with("UUID", json!(format!("{}\u{7}", "u".repeat(5000)))).unwrap_err().to_string();
        assert!(error.len() < 400 && !error.contains('\u{7}'), "{error}");
        let target = |t: &str| json!({"#ComputerSystem.Reset": {"target": t}});
        assert!(with("Actions", target("https://evil/redfish/v1/Systems/abc/Actions/R")).is_err());
        assert!(with("Actions", target("/redfish/v1/Systems/abc/Actions/R?x=1")).is_err());
    }

    #[test]
    fn a_collection_lists_resolved_member_paths_its_count_and_next_page() {
        let page = json!({"Members": [{"@odata.id": "/redfish/v1/Systems/1"}, {"@odata.id": "https://10.0.0.1:8443/redfish/v1/Systems/2/"}],
            "Members@odata.count": 3, "Members@odata.nextLink": "/redfish/v1/Systems?$skip=2"});
        assert_eq!(
            parse_collection(&origin(), "/redfish/v1/Systems", &page).unwrap(),
            CollectionPage {
                members: vec!["/redfish/v1/Systems/1".into(), "/redfish/v1/Systems/2/".into()],
                count: Some(3),
                next: Some("/redfish/v1/Systems?$skip=2".into()),
            }
        );
        for broken in [
            json!({}),
            json!({"Members": [{"Id": "1"}]}),
            json!({"Members": [{"@odata.id": "https://other/redfish/v1/Systems/1"}]}),
            json!({"Members": [{"@odata.id": "/redfish/v1/Systems/1%2f..%2f2"}]}),
            json!({"Members": [{"@odata.id": "/redfish/v1/Systems/1?x"}]}),
            json!({"Members": [], "Members@odata.count": -1}),
            json!({"Members": [], "Members@odata.nextLink": 7}),
        ] {
            assert!(parse_collection(&origin(), "/redfish/v1/Systems", &broken).is_err(), "{broken}");
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
            "https://u:p@10.0.0.1:8443/redfish/v1",
        ] {
            let error = bmc.url(elsewhere).unwrap_err();
            assert!(matches!(error, BmcError::Protocol { .. }), "{elsewhere}");
            assert!(!error.to_string().contains("u:p@"), "{error}");
        }
    }

    #[test]
    fn a_pinned_system_id_is_one_path_segment() {
        let bmc = client();
        assert_eq!(bmc.system_path("System.Embedded.1").unwrap(), "/redfish/v1/Systems/System.Embedded.1");
        assert_eq!(bmc.system_path("/redfish/v1/Systems/1").unwrap(), "/redfish/v1/Systems/1");
        for id in ["..", ".", "1%2f..%2f2", "a%5cb", ""] {
            assert!(matches!(bmc.system_path(id), Err(BmcError::Setup(_))), "{id:?}");
        }
    }

    #[tokio::test]
    async fn a_reset_target_outside_the_system_is_refused_before_sending() {
        for target in [
            "/redfish/v1/Systems/2/Actions/ComputerSystem.Reset",
            "/redfish/v1/Systems/1/../2/Actions/ComputerSystem.Reset",
            "/redfish/v1/Systems/1/%2e%2e/2/Actions/ComputerSystem.Reset",
            "/redfish/v1/Systems/1%2f..%2f2/Actions/ComputerSystem.Reset",
            "/redfish/v1/Systems/1/Actions%2f..%2f..%2f..%2f2/ComputerSystem.Reset",
            "/redfish/v1/Systems/10/Actions/ComputerSystem.Reset",
            "/redfish/v1/Systems/1",
        ] {
            let system = SystemReading {
                id: "1".into(),
                path: "/redfish/v1/Systems/1".into(),
                uuid: UUID.into(),
                power_state: PowerState::On,
                reset_target: Some(target.into()),
                aliases: Vec::new(),
            };
            // Refused before any request: 10.0.0.1 is never contacted (that would be Unreachable).
            let error = client().reset(&system, ResetType::ForceOff).await.unwrap_err();
            assert!(matches!(error, BmcError::Protocol { .. }), "{target}: {error:?}");
        }
    }

    #[test]
    fn an_endpoint_is_never_echoed_with_its_credentials() {
        for endpoint in [
            "https://admin:secret@10.0.0.1/redfish/v1",
            "http://admin:secret@10.0.0.1/redfish/v1",
            "https://admin:secret@10.0.0.1:badport/redfish/v1",
            "admin:secret@10.0.0.1",
        ] {
            let error = RedfishClient::new(RedfishConfig { endpoint: endpoint.into(), ..client_config() }).unwrap_err();
            assert!(matches!(error, SetupError::Endpoint(_)), "{endpoint}");
            assert!(!format!("{error} {error:?}").contains("secret"), "{endpoint}: {error}");
        }
    }

    #[test]
    fn error_messages_are_bounded() {
        let long = "x".repeat(5000);
        let body = serde_json::to_vec(&json!({"error": {"message": long}})).unwrap();
        assert_eq!(redfish_message(&body).unwrap().chars().count(), MAX_MESSAGE_CHARS);
        let extended =
            serde_json::to_vec(&json!({"error": {"@Message.ExtendedInfo": [{"Message": "power off disabled"}]}}))
                .unwrap();
        assert_eq!(redfish_message(&extended).as_deref(), Some("power off disabled"));
        let hostile = serde_json::to_vec(&json!({"error": {"message": "a\u{1b}]0;pwned\u{7}b"}})).unwrap();
        assert!(!redfish_message(&hostile).unwrap().chars().any(char::is_control));
    }

    // Property tests: a Redfish body from raw bytes ----------------------------------------------------

    /// A system body from the raw bytes a BMC may send, as the client reads it.
    fn system_from_bytes(bytes: &[u8]) -> Result<SystemReading, BmcError> {
        parse_system(&origin(), &at("/redfish/v1/Systems/abc"), &decode("/redfish/v1/Systems/abc", bytes)?)
    }

    /// JSON text with the fields the parser looks at (valid or not), nested and repeated at random.
    fn json_text() -> impl Strategy<Value = String> {
        let scalar = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            any::<i64>().prop_map(|n| n.to_string()),
            Just(format!("\"{UUID}\"")),
            Just("\"On\"".to_owned()),
            Just("\"Off\"".to_owned()),
            "\"[a-zA-Z0-9 ./#@-]{0,12}\"",
            (0usize..3000).prop_map(|n| format!("\"{}\"", "u".repeat(n))),
        ];
        let key = prop_oneof![
            Just("UUID"),
            Just("PowerState"),
            Just("Id"),
            Just("@odata.id"),
            Just("Actions"),
            Just("#ComputerSystem.Reset"),
            Just("target"),
            Just("Oem"),
        ];
        scalar.prop_recursive(6, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(|items| format!("[{}]", items.join(","))),
                prop::collection::vec((key.clone(), inner), 0..6).prop_map(|fields| {
                    let fields: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    format!("{{{}}}", fields.join(","))
                }),
            ]
        })
    }

    /// A system body: the UUID and PowerState fields present or not, valid or not, among other fields
    /// (nested, repeated, huge) in any order.
    fn system_text() -> impl Strategy<Value = String> {
        let uuid = prop_oneof![
            4 => Just(format!("\"{UUID}\"")),
            2 => Just(format!("\"  {}\"", UUID.to_uppercase())),
            1 => json_text(),
        ];
        let power = prop_oneof![3 => Just("\"Off\"".to_owned()), 3 => Just("\"On\"".to_owned()), 1 => json_text()];
        let key = prop_oneof![
            1 => Just("UUID"),
            1 => Just("PowerState"),
            1 => Just("Id"),
            1 => Just("@odata.id"),
            1 => Just("Actions"),
            6 => Just("Oem"),
            6 => Just("Name"),
            6 => Just("Status"),
        ];
        let state = prop_oneof![
            Just("\"Enabled\"".to_owned()),
            Just("\"Absent\"".to_owned()),
            Just("\"UnavailableOffline\"".to_owned()),
            json_text()
        ]
        .prop_map(|state| format!("{{\"State\":{state}}}"));
        let field = prop_oneof![4 => (key, json_text()), 1 => state.prop_map(|state| ("Status", state))];
        (
            proptest::option::weighted(0.9, uuid),
            proptest::option::weighted(0.9, power),
            prop::collection::vec(field, 0..3),
            any::<prop::sample::Index>(),
        )
            .prop_map(|(uuid, power, extra, at)| {
                let mut fields: Vec<String> = extra.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                let known = [uuid.map(|u| format!("\"UUID\":{u}")), power.map(|p| format!("\"PowerState\":{p}"))];
                for field in known.into_iter().flatten() {
                    fields.insert(at.index(fields.len() + 1), field);
                }
                format!("{{{}}}", fields.join(","))
            })
    }

    /// Whether some object in `text` repeats a key (the oracle, by serde_json's lenient reading).
    fn has_duplicate_key(value: &str) -> bool {
        fn walk(text: &mut &str) -> bool {
            // Tiny recursive reader for the generated subset: objects, arrays, strings without escapes, atoms.
            let mut duplicate = false;
            match text.as_bytes().first() {
                Some(b'{') => {
                    *text = &text[1..];
                    let mut keys = HashSet::new();
                    while !text.starts_with('}') {
                        let end = text[1..].find('"').unwrap() + 1;
                        duplicate |= !keys.insert(text[1..end].to_owned());
                        *text = &text[end + 2..];
                        duplicate |= walk(text);
                        *text = text.strip_prefix(',').unwrap_or(text);
                    }
                    *text = &text[1..];
                }
                Some(b'[') => {
                    *text = &text[1..];
                    while !text.starts_with(']') {
                        duplicate |= walk(text);
                        *text = text.strip_prefix(',').unwrap_or(text);
                    }
                    *text = &text[1..];
                }
                Some(b'"') => {
                    let end = text[1..].find('"').unwrap() + 2;
                    *text = &text[end..];
                }
                _ => {
                    let end = text.find([',', '}', ']']).unwrap_or(text.len());
                    *text = &text[end..];
                }
            }
            duplicate
        }
        walk(&mut &*value)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_bytes_never_panic_and_prove_nothing_without_uuid_and_power(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(reading) = system_from_bytes(&bytes) {
                prop_assert!(crate::words::uuid::parse(&reading.uuid).is_some());
            }
        }

        #[test]
        fn a_body_is_accepted_only_with_a_uuid_and_a_power_state_and_no_repeated_key(text in prop_oneof![json_text(), system_text()]) {
            let lenient: Option<Value> = serde_json::from_str(&text).ok();
            match system_from_bytes(text.as_bytes()) {
                Ok(reading) => {
                    prop_assert!(!has_duplicate_key(&text), "a repeated key was accepted: {}", text);
                    let lenient = lenient.unwrap();
                    prop_assert_eq!(lenient["UUID"].as_str().map(str::trim), Some(reading.uuid.as_str()));
                    prop_assert!(crate::words::uuid::parse(&reading.uuid).is_some());
                    let state = lenient.pointer("/Status/State").and_then(Value::as_str);
                    prop_assert_eq!(PowerState::with_state(lenient["PowerState"].as_str().unwrap(), state), reading.power_state.clone());
                    prop_assert!(reading.id.chars().count() <= MAX_ID_CHARS && !reading.id.chars().any(char::is_control));
                    if let PowerState::Other(value) = &reading.power_state {
                        prop_assert!(value.chars().count() <= MAX_VALUE_CHARS);
                    }
                }
                Err(error) => {
                    if has_duplicate_key(&text) {
                        prop_assert!(error.to_string().contains("appears twice"), "{}: {}", text, error);
                    }
                    prop_assert!(error.to_string().chars().count() < 1000);
                }
            }
        }

        #[test]
        fn non_utf8_or_truncated_bodies_are_refused(cut in 0usize..60, junk in any::<u8>().prop_filter("not ASCII", |b| *b >= 0x80)) {
            let body = format!(r#"{{"UUID": "{UUID}", "PowerState": "Off", "Id": "abc"}}"#).into_bytes();
            let cut = cut.min(body.len() - 1);
            prop_assert!(system_from_bytes(&body[..cut]).is_err());
            let mut spoiled = body.clone();
            spoiled.insert(body.iter().position(|b| *b == b'O').unwrap(), junk);
            prop_assert!(system_from_bytes(&spoiled).is_err());
        }

        #[test]
        fn deep_nesting_never_overflows_the_stack(depth in 0usize..5000, objects in any::<bool>()) {
            let (open, close) = if objects { (r#"{"Oem":"#, "}") } else { ("[", "]") };
            let body = format!(r#"{{"UUID": "{UUID}", "PowerState": "Off", "Oem": {}1{}}}"#, open.repeat(depth), close.repeat(depth));
            // serde_json's limit is 128 levels: deeper is refused, shallower is read.
            prop_assert_eq!(system_from_bytes(body.as_bytes()).is_ok(), depth < 127);
        }
    }
}
