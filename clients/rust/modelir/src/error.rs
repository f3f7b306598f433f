//! Typed errors, decoded from the rich gRPC status (`grpc-status-details-bin`) the server sends.
use prost::Message as _;
use std::fmt;
use tonic_types::{BadRequest, ErrorInfo, RetryInfo, StatusExt};

use crate::v1;

/// The `ErrorInfo.domain` of every error modelir raises.
pub const ERROR_DOMAIN: &str = "modelir.dev";

/// What went wrong, from `ErrorInfo.reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidRequest,
    UnsupportedCapability,
    UnknownModel,
    Unauthenticated,
    RateLimited,
    Provider,
    DeadlineExceeded,
    /// Any other reason, or none (the channel itself failed).
    Other,
}

/// A failed call: the gRPC code, modelir's reason and every structured detail the server sent.
#[derive(Debug, Clone)]
pub struct RpcError {
    /// The gRPC status code.
    pub code: tonic::Code,
    /// `ErrorInfo.reason` when the server sent one (e.g. `UNSUPPORTED_CAPABILITY`), else the code's name.
    pub reason: String,
    /// The status message.
    pub message: String,
    pub error_info: Option<ErrorInfo>,
    /// The invalid fields, for `INVALID_REQUEST`.
    pub bad_request: Option<BadRequest>,
    /// Every missing capability and exceeded limit, for `UNSUPPORTED_CAPABILITY`.
    pub unsupported: Option<v1::UnsupportedCapabilities>,
    /// How long to wait before retrying, when the server said (`RATE_LIMITED`).
    pub retry_info: Option<RetryInfo>,
}

const CODE_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

impl RpcError {
    /// The canonical name of the gRPC code, e.g. `FAILED_PRECONDITION`.
    pub fn code_name(&self) -> &'static str {
        CODE_NAMES.get(self.code as usize).copied().unwrap_or("UNKNOWN")
    }

    /// The kind of error, from the reason.
    pub fn kind(&self) -> ErrorKind {
        match self.reason.as_str() {
            "INVALID_REQUEST" => ErrorKind::InvalidRequest,
            "UNSUPPORTED_CAPABILITY" => ErrorKind::UnsupportedCapability,
            "UNKNOWN_MODEL" => ErrorKind::UnknownModel,
            "UNAUTHENTICATED" => ErrorKind::Unauthenticated,
            "RATE_LIMITED" => ErrorKind::RateLimited,
            "PROVIDER_AUTH" | "PROVIDER_UNAVAILABLE" | "PROVIDER_REJECTED" => ErrorKind::Provider,
            "DEADLINE_EXCEEDED" => ErrorKind::DeadlineExceeded,
            _ => ErrorKind::Other,
        }
    }
}

impl From<tonic::Status> for RpcError {
    fn from(status: tonic::Status) -> Self {
        let details = status.get_error_details();
        let error_info = details.error_info().filter(|info| info.domain == ERROR_DOMAIN).cloned();
        // tonic-types knows the google.rpc details; modelir's own type is unpacked from the status proto.
        let unsupported = tonic_types::pb::Status::decode(status.details()).ok().and_then(|st| {
            st.details
                .iter()
                .find(|any| any.type_url.ends_with("/modelir.v1.UnsupportedCapabilities"))
                .and_then(|any| v1::UnsupportedCapabilities::decode(any.value.as_slice()).ok())
        });
        // tonic reports its own deadline (`grpc-timeout`, enforced by the channel) as CANCELLED "Timeout expired";
        // gRPC's status for a call past its deadline is DEADLINE_EXCEEDED, as the other clients report it.
        let code = match status.code() {
            tonic::Code::Cancelled if timed_out(&status) => tonic::Code::DeadlineExceeded,
            code => code,
        };
        let code_name = CODE_NAMES.get(code as usize).copied().unwrap_or("UNKNOWN");
        RpcError {
            code,
            reason: error_info.as_ref().map_or_else(|| code_name.to_owned(), |info| info.reason.clone()),
            message: status.message().to_owned(),
            error_info,
            bad_request: details.bad_request().cloned(),
            unsupported,
            retry_info: details.retry_info().cloned(),
        }
    }
}

/// Whether `status` stands for tonic's own timeout (a `TimeoutExpired` in its source chain).
fn timed_out(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if error.is::<tonic::TimeoutExpired>() {
            return true;
        }
        source = error.source();
    }
    false
}

/// Everything the client can fail with.
#[derive(Debug)]
pub enum Error {
    /// The server answered with an error status.
    Rpc(Box<RpcError>),
    /// The server speaks an IR of another major version.
    IncompatibleServer { client: String, server: String },
    /// The connection could not be made.
    Transport(tonic::transport::Error),
}

impl Error {
    /// The RPC error, when the server answered with one.
    pub fn rpc(&self) -> Option<&RpcError> {
        match self {
            Error::Rpc(e) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Rpc(e) => write!(f, "modelir: {}: {}", e.reason, e.message),
            Error::IncompatibleServer { client, server } => write!(
                f,
                "the server speaks modelir IR {}, but this client was generated from IR {client}: the major versions \
                 differ, so the client refuses it (regenerate the client from the server's proto/ or talk to a \
                 server of the same major version)",
                if server.is_empty() { "(none reported)" } else { server }
            ),
            Error::Transport(e) => write!(f, "modelir: cannot connect: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Self {
        Error::Rpc(Box::new(status.into()))
    }
}

impl From<tonic::transport::Error> for Error {
    fn from(error: tonic::transport::Error) -> Self {
        Error::Transport(error)
    }
}
