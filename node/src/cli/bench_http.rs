//! One HTTP/1.1 connection of a `lode bench` client to a member's HTTP
//! port (TLS for an `https://` port), carrying a bearer token: what the
//! Deno KV workloads (`bench_kv_connect.rs`) and the State API's HTTP
//! workload (`bench_state_http.rs`) send their calls over, one at a time,
//! as a program of the user's would.

use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, USER_AGENT};
use lode_client::facade::ByteStream;
use lode_client::tls::ClientTls;

/// Most bytes of one response body the bench reads: a point read's or an
/// update's answer, and KV Connect's metadata document, are far smaller.
pub const BENCH_RESPONSE_BYTES_MAX: usize = 1 << 20;

/// A connection to one member's HTTP port.
pub struct HttpConnection {
    sender: SendRequest<Full<Bytes>>,
    authority: String,
    /// `Bearer <token>`, which every request carries, when there is one.
    authorization: Option<String>,
}

impl HttpConnection {
    /// Connects to `url` (`http://host:port`, or `https://host:port`
    /// trusting `tls`'s CA), sending `token` with every request; `flag`
    /// is the option that named `url`, for the errors.
    pub async fn connect(
        url: &str,
        flag: &str,
        token: Option<&str>,
        tls: Option<&ClientTls>,
    ) -> Result<Self, anyhow::Error> {
        let (authority, tls) = match (url.split_once("://"), tls) {
            (Some(("http", authority)), _) => (authority, None),
            (Some(("https", authority)), Some(tls)) => (authority, Some(tls)),
            (Some(("https", _)), None) => bail!("{flag} {url} is https: give the cluster's CA with --tls-ca"),
            _ => bail!("{flag} must name http:// or https:// URLs, not {url}"),
        };
        let authority = authority.trim_end_matches('/').to_owned();
        let stream = tokio::net::TcpStream::connect(&authority)
            .await
            .with_context(|| format!("connecting to {authority}"))?;
        stream.set_nodelay(true)?;
        let stream: Box<dyn ByteStream> = match tls {
            Some(tls) => tls
                .connect(Box::new(stream), &authority)
                .await
                .with_context(|| format!("the TLS handshake with {authority}"))?,
            None => Box::new(stream),
        };
        let (sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(Self {
            sender,
            authority,
            authorization: token.map(|token| format!("Bearer {token}")),
        })
    }

    /// From now on, requests carry `token` (KV Connect's session token
    /// replaces the access token after the metadata exchange).
    pub fn use_token(&mut self, token: &str) {
        self.authorization = Some(format!("Bearer {token}"));
    }

    /// One GET; an answer other than 2xx is an error carrying the
    /// server's text, and a body over `limit` (its name and bytes) too.
    pub async fn get(&mut self, path: &str, limit: (&str, usize)) -> Result<Bytes, anyhow::Error> {
        let request = self.request(hyper::Request::get(path)).body(Full::new(Bytes::new()))?;
        self.send(request, path, limit).await
    }

    /// One POST with `headers` besides the usual ones; an answer other
    /// than 2xx is an error carrying the server's text.
    pub async fn post(
        &mut self,
        path: &str,
        content_type: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<Bytes, anyhow::Error> {
        let mut request = self
            .request(hyper::Request::post(path))
            .header(CONTENT_TYPE, content_type);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::from(body)))?;
        self.send(request, path, ("bench_response_bytes_max", BENCH_RESPONSE_BYTES_MAX))
            .await
    }

    /// `request` with the headers every request carries.
    fn request(&self, request: hyper::http::request::Builder) -> hyper::http::request::Builder {
        let request = request
            .header(HOST, &self.authority)
            .header(USER_AGENT, concat!("lode-bench/", env!("CARGO_PKG_VERSION")));
        match &self.authorization {
            Some(authorization) => request.header(AUTHORIZATION, authorization),
            None => request,
        }
    }

    async fn send(
        &mut self,
        request: hyper::Request<Full<Bytes>>,
        path: &str,
        limit: (&str, usize),
    ) -> Result<Bytes, anyhow::Error> {
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        super::helpers::read_answer(response, path, limit).await
    }
}
