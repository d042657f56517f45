//! A failed call to the Kubernetes API, by what the loop does about it.

/// A failed call to the Kubernetes API, by what the loop does about it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The object changed since it was read (HTTP 409): read again and decide again.
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("not found: {0}")]
    NotFound(String),
    /// Refused for good as sent (403, 422, an admission webhook or policy).
    #[error("denied: {0}")]
    Denied(String),
    /// Transport trouble, timeouts, 5xx: may clear by itself.
    #[error("Kubernetes API unavailable: {0}")]
    Unavailable(String),
}

impl ApiError {
    /// Event reason suffix and metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Conflict(_) => "conflict",
            Self::NotFound(_) => "not-found",
            Self::Denied(_) => "denied",
            Self::Unavailable(_) => "kube-api",
        }
    }
}

impl From<kube::Error> for ApiError {
    fn from(error: kube::Error) -> Self {
        match &error {
            kube::Error::Api(status) if status.code == 409 => Self::Conflict(status.message.clone()),
            kube::Error::Api(status) if status.code == 404 => Self::NotFound(status.message.clone()),
            kube::Error::Api(status) if matches!(status.code, 400 | 403 | 422) => Self::Denied(status.message.clone()),
            _ => Self::Unavailable(error.to_string()),
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
