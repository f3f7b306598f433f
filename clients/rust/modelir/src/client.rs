//! The thin client: one method per `ModelService` RPC over tonic, typed errors, the IR version handshake.
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::error::Error;
use crate::v1;
use crate::v1::model_service_client::ModelServiceClient;
use crate::version::{check_compatible, ir_version};

/// Adds `authorization: Bearer <token>` to every call when a token is set, and the call's deadline
/// (`grpc-timeout`) when one is set.
#[derive(Clone)]
pub struct BearerToken(Option<MetadataValue<Ascii>>, Option<Duration>);

impl tonic::service::Interceptor for BearerToken {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request.metadata_mut().insert("authorization", token.clone());
        }
        if let Some(timeout) = self.1 {
            request.set_timeout(timeout);
        }
        Ok(request)
    }
}

/// A client of one modelir server. Cloning is cheap and clones share the connection.
#[derive(Clone)]
pub struct Client {
    rpc: ModelServiceClient<InterceptedService<Channel, BearerToken>>,
    channel: Channel,
    token: Option<MetadataValue<Ascii>>,
}

/// The events of one `StreamGenerate` call; dropping it cancels the call.
pub struct EventStream(tonic::Streaming<v1::StreamGenerateResponse>);

impl EventStream {
    /// Cancels the call (the server stops generating) and returns what the call ended with, `CANCELLED`, as
    /// the other clients report a call they cancelled.
    pub fn cancel(self) -> Error {
        drop(self.0);
        tonic::Status::cancelled("the client cancelled the call").into()
    }

    /// The next event, `None` at the end of the stream.
    pub async fn next(&mut self) -> Option<Result<v1::StreamEvent, Error>> {
        match self.0.message().await {
            Ok(Some(message)) => Some(Ok(message.event.unwrap_or_default())),
            Ok(None) => None,
            Err(status) => Some(Err(status.into())),
        }
    }
}

impl Client {
    /// Connects to `target` (`host:port`) without the version handshake; see [`Client::connect`].
    pub async fn dial(target: &str, token: Option<&str>) -> Result<Client, Error> {
        let channel = Endpoint::from_shared(format!("http://{target}"))?.connect().await?;
        let token = token.map(|t| {
            format!("Bearer {t}")
                .parse()
                .map_err(|_| Error::from(tonic::Status::invalid_argument("the token is not a valid header value")))
        });
        let token = token.transpose()?;
        let rpc = ModelServiceClient::with_interceptor(channel.clone(), BearerToken(token.clone(), None));
        Ok(Client { rpc, channel, token })
    }

    /// This client with a deadline on every call: the server ends a call that takes longer with
    /// `DEADLINE_EXCEEDED` (sent as `grpc-timeout`). Clones share the connection.
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        let intercept = BearerToken(self.token.clone(), Some(timeout));
        Client { rpc: ModelServiceClient::with_interceptor(self.channel.clone(), intercept), ..self.clone() }
    }

    /// [`Client::dial`] plus the handshake: refuses ([`Error::IncompatibleServer`]) a server whose IR major version
    /// differs from the one this client was generated from.
    pub async fn connect(target: &str, token: Option<&str>) -> Result<Client, Error> {
        let client = Client::dial(target, token).await?;
        check_compatible(&client.server_info().await?.ir_version, ir_version())?;
        Ok(client)
    }

    /// Runs one request and returns the complete response.
    pub async fn generate(&self, request: v1::Request) -> Result<v1::Response, Error> {
        let answer = self.rpc.clone().generate(v1::GenerateRequest { request: Some(request) }).await?;
        Ok(answer.into_inner().response.unwrap_or_default())
    }

    /// Runs one request and streams its events; [`crate::Accumulator`] folds them into the unary response.
    pub async fn stream(&self, request: v1::Request) -> Result<EventStream, Error> {
        let answer = self.rpc.clone().stream_generate(v1::StreamGenerateRequest { request: Some(request) }).await?;
        Ok(EventStream(answer.into_inner()))
    }

    /// Tokenizes text as the model does, optionally after a context.
    pub async fn tokenize(&self, request: v1::TokenizeRequest) -> Result<v1::TokenizeResponse, Error> {
        Ok(self.rpc.clone().tokenize(request).await?.into_inner())
    }

    /// Turns token ids back into text with the model's own tokenizer.
    pub async fn detokenize(&self, model: &str, token_ids: Vec<i32>) -> Result<String, Error> {
        let request = v1::DetokenizeRequest { model: model.to_owned(), token_ids };
        Ok(self.rpc.clone().detokenize(request).await?.into_inner().text)
    }

    /// The configured models with their capability manifests, sorted by name.
    pub async fn list_models(&self) -> Result<Vec<v1::ModelInfo>, Error> {
        Ok(self.rpc.clone().list_models(v1::ListModelsRequest {}).await?.into_inner().models)
    }

    /// Checks a request against its model's capabilities without running it.
    pub async fn validate(&self, request: v1::Request) -> Result<v1::ValidateResponse, Error> {
        Ok(self.rpc.clone().validate(v1::ValidateRequest { request: Some(request) }).await?.into_inner())
    }

    /// Embeds each input with an embedding model (IR 1.1; needs `CAPABILITY_EMBEDDINGS`), one vector per input.
    pub async fn embed(&self, request: v1::EmbedRequest) -> Result<v1::EmbedResponse, Error> {
        Ok(self.rpc.clone().embed(request).await?.into_inner())
    }

    /// The server's IR version, its own version and its transports.
    pub async fn server_info(&self) -> Result<v1::GetServerInfoResponse, Error> {
        Ok(self.rpc.clone().get_server_info(v1::GetServerInfoRequest {}).await?.into_inner())
    }
}
