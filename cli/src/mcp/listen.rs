//! Serving the gateway over Streamable HTTP (`--listen`): the listener, with TLS when asked, and who may
//! call (the static bearer token or an OAuth 2.1 resource server).

use agent_airlock::integrations::mcp_gateway::{
    BearerToken, HttpAuth, KeySource, OAuthConfig, OAuthResourceServer, parse_algorithm,
};
use tokio::net::TcpListener;

use super::args::{GatewayArgs, OAuthArgs};

/// The listener of `--listen` and how its clients are admitted: the static token, or OAuth access tokens.
pub(super) async fn listener(
    args: &GatewayArgs,
    addr: std::net::SocketAddr,
) -> Result<(TcpListener, HttpAuth), String> {
    if !addr.ip().is_loopback() && !args.allow_remote {
        return Err(format!(
            "`--listen {addr}` is not a loopback address: clients on other machines could reach the gateway; pass \
             `--allow-remote` to mean it"
        ));
    }
    if let Some(issuer) = &args.oauth.oauth_issuer {
        if std::env::var_os(&args.token_env).is_some() {
            return Err(format!(
                "`--oauth-issuer` admits OAuth access tokens only: unset `{}` (the static bearer token) or leave out \
                 `--oauth-issuer`",
                args.token_env
            ));
        }
        let listener = TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let bound = listener.local_addr().map_err(|e| e.to_string())?;
        let server = oauth_server(&args.oauth, issuer, bound)?;
        server
            .fetch_keys()
            .await
            .map_err(|why| format!("`--oauth-issuer`: the issuer's keys cannot be fetched: {why}"))?;
        return Ok((listener, HttpAuth::OAuth(server)));
    }
    let token = match &args.token_file {
        Some(path) => {
            crate::warn_if_others_can_read(path);
            std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => std::env::var(&args.token_env).map_err(|_| {
            format!(
                "`--listen` needs the bearer token clients must send: put it in `{}` or a file named by `--token-file`",
                args.token_env
            )
        })?,
    };
    let token = BearerToken::new(&token).ok_or("the bearer token for `--listen` is empty")?;
    let listener = TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    Ok((listener, HttpAuth::Token(token)))
}

/// The resource server `--oauth-issuer` and its options describe, for a gateway listening on `bound`.
pub(super) fn oauth_server(
    args: &OAuthArgs,
    issuer: &str,
    bound: std::net::SocketAddr,
) -> Result<OAuthResourceServer, String> {
    let keys = match &args.jwks_file {
        Some(path) => KeySource::from_file(path).map_err(|e| format!("`--jwks-file`: {e}"))?,
        None => KeySource::Discover,
    };
    let resource = args.oauth_resource.clone().unwrap_or_else(|| format!("http://{bound}/mcp"));
    let mut config = OAuthConfig::new(issuer, resource, keys);
    if let Some(audience) = &args.oauth_audience {
        config.audience = audience.clone();
    }
    config.claims = args.oauth_claims.iter().map(|c| c.trim().to_owned()).filter(|c| !c.is_empty()).collect();
    config.scopes_supported = args.oauth_scopes.iter().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect();
    if !args.oauth_algorithms.is_empty() {
        config.algorithms = args
            .oauth_algorithms
            .iter()
            .map(|name| parse_algorithm(name.trim()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("`--oauth-algorithms`: {e}"))?;
    }
    OAuthResourceServer::new(config).map_err(|e| format!("`--oauth-issuer`: {e}"))
}
