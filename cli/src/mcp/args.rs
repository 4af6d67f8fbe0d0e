//! The command line of `airlock mcp`: the gateway's options, its subcommands, the OpenTelemetry endpoint
//! and the OAuth resource server's options.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::sandbox;

/// `airlock mcp …`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct McpArgs {
    #[command(subcommand)]
    pub(super) command: Option<McpCommand>,
    /// Boxed: the gateway's options outweigh every other command's.
    #[command(flatten)]
    pub(super) run: Box<GatewayArgs>,
}

#[derive(Subcommand)]
pub(super) enum McpCommand {
    /// Print a starter policy for an MCP server: deny by default, every tool listed with its definition pin
    /// and what the tool-poisoning scan finds in its definition (reported on standard error too; the exit
    /// status is non-zero when anything is found).
    Scan {
        /// Pass an environment variable to the server: `NAME` copies the gateway's, `NAME=VALUE` sets it.
        /// The server otherwise gets only `PATH`, `HOME`, the locale and a few more (see the README).
        #[arg(long = "env", value_name = "NAME[=VALUE]")]
        env: Vec<String>,
        /// The upstream server's command line, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        upstream: Vec<OsString>,
    },
    /// The sandbox's launcher, which `--sandbox` starts instead of the server: sets up the sandbox the plan
    /// describes on itself, then becomes the server.
    #[command(name = "sandbox-exec", hide = true)]
    SandboxExec {
        /// The plan (JSON), made by the gateway.
        plan: String,
        /// The server's command line, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<OsString>,
    },
}

/// Running the gateway.
#[derive(Args)]
pub(super) struct GatewayArgs {
    /// The policy file (TOML, see `airlock policy check`); `airlock mcp scan` writes a starter.
    #[arg(long, required = true)]
    pub(super) policy: Option<PathBuf>,
    /// A file holding the approval key's secret as hex; without it (and without `--key-env`'s variable)
    /// the gateway makes a key for this run, and approvals do not outlive it.
    #[arg(long, conflicts_with = "key_env")]
    pub(super) key_file: Option<PathBuf>,
    /// An environment variable holding the approval key's secret as hex.
    #[arg(long, default_value = "AIRLOCK_APPROVAL_KEY")]
    pub(super) key_env: String,
    /// How long an escalated call waits for its approval (the client's human, or an operator where the
    /// policy says `approver = "operator"`), in seconds.
    #[arg(long, default_value_t = 600)]
    pub(super) approval_timeout_secs: u64,
    /// How often a call waiting for an operator's decision (`approver = "operator"`) looks for it in the store,
    /// in milliseconds: each look is one read of the store (a PostgreSQL round trip with `--db postgres://…`).
    #[arg(long, value_name = "MS", default_value_t = 250, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) operator_poll_ms: u64,
    /// The operators file (`airlock operators add`): an approval counts only if it is signed by keys it
    /// lists, `approvals = N` counts distinct keys, and the approval key or write access to the store no
    /// longer approves. Every approval is then an operator's: a call routed to the client's human cannot
    /// be approved. Read once at start; restart the gateway after `airlock operators revoke`.
    #[arg(long, env = "AIRLOCK_OPERATORS", value_name = "FILE")]
    pub(super) operators: Option<PathBuf>,
    /// The audit log's redb file, when it is not `--db` (needed with a PostgreSQL `--db`, unless
    /// `--audit-file` is given).
    #[arg(long, value_name = "PATH", conflicts_with = "audit_file")]
    pub(super) audit: Option<PathBuf>,
    /// The audit log in an append-only file of its own (created if missing): one write and one `fdatasync`
    /// per call's records instead of a redb commit, several times less of the gateway's own latency
    /// (BENCHMARKS.md §8). An escalated call's grant spend and its record are then two writes, not one
    /// transaction: if the record cannot be written, the spend stands and the call is refused (the record is
    /// what a grant revived in the database is checked by), logged as an error; other calls run, their records
    /// lost (logged). A request the gateway closes records the grant it revokes here first.
    /// Read it with `airlock audit verify --file PATH`; `airlock effects resolve --audit-file PATH` and the
    /// console append resolutions to it while the gateway runs (each append takes the file's lock for its
    /// write). A write cut short by a crash is cut off by the next append or start and kept beside it
    /// (`PATH.torn-OFFSET`), other damage refuses the start or the append.
    #[arg(long, value_name = "PATH")]
    pub(super) audit_file: Option<PathBuf>,
    /// The audit log's key (`--audit-key-file` or `--audit-key-env`): every record is then MACed with it, and
    /// `airlock audit verify` needs the same key. A log already keyed is refused without its key.
    #[command(flatten)]
    pub(super) audit_key: crate::AuditKeySource,
    /// Pass an environment variable to the upstream server: `NAME` copies the gateway's, `NAME=VALUE` sets
    /// it. The server otherwise gets only `PATH`, `HOME`, the locale and a few more (see the README), never an
    /// `AIRLOCK_*` variable nor the ones `--key-env`, `--token-env` and `--upstream-token-env` name.
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub(super) env: Vec<String>,
    /// The largest message read from the upstream server, a tool's result included, in bytes (16 MiB by
    /// default). A larger result fails its call at once with a JSON-RPC error and leaves its effect ambiguous.
    #[arg(long, value_name = "BYTES", default_value_t = agent_airlock::integrations::mcp_gateway::DEFAULT_MAX_MESSAGE_BYTES)]
    pub(super) max_result_bytes: usize,
    /// Start even when a `[tools.…]` table of the policy names no tool the upstream offers (each is then
    /// reported as a warning); without it such a table (a typo, `[tools.wirte_file]`) stops the gateway.
    #[arg(long)]
    pub(super) allow_unmatched_tables: bool,
    /// `--sandbox` and its options.
    #[command(flatten)]
    pub(super) sandbox: sandbox::SandboxArgs,
    /// The upstream server's command line, after `--`.
    #[arg(last = true, required_unless_present = "upstream_url", value_name = "COMMAND")]
    pub(super) upstream: Vec<OsString>,
    /// Connect to an upstream served over Streamable HTTP (`http://…/mcp`) instead of starting one.
    #[arg(long, value_name = "URL", conflicts_with = "upstream")]
    pub(super) upstream_url: Option<String>,
    /// An environment variable holding the bearer token the upstream at `--upstream-url` expects.
    #[arg(long, value_name = "VAR", requires = "upstream_url")]
    pub(super) upstream_token_env: Option<String>,
    /// Serve clients over Streamable HTTP on this address (e.g. `127.0.0.1:8765`) instead of stdio. Every
    /// request needs `Authorization: Bearer <token>`: the static token read from `--token-file` or
    /// `--token-env`, or with `--oauth-issuer` an OAuth access token (a JWT) of that issuer.
    #[arg(long, value_name = "ADDR")]
    pub(super) listen: Option<std::net::SocketAddr>,
    /// Allow `--listen` on an address other than loopback (the token is then the only gate).
    #[arg(long, requires = "listen")]
    pub(super) allow_remote: bool,
    /// A file holding the bearer token clients of `--listen` must send.
    #[arg(long, value_name = "PATH", requires = "listen", conflicts_with = "token_env")]
    pub(super) token_file: Option<PathBuf>,
    /// An environment variable holding the bearer token clients of `--listen` must send.
    #[arg(long, value_name = "VAR", default_value = "AIRLOCK_GATEWAY_TOKEN")]
    pub(super) token_env: String,
    /// Export each decision (a span per tool call, counters of refusals, approvals and effects) over OTLP/HTTP
    /// to the collector at this base URL, e.g. `http://127.0.0.1:4318` (spans to `/v1/traces`, counters to
    /// `/v1/metrics`). Never argument values, results or secrets. Sent in the background; what is queued is
    /// sent when the gateway stops. Without it, `OTEL_EXPORTER_OTLP_ENDPOINT` is used if set, and if the
    /// gateway cannot export there (an `https` collector, say) it says so and runs without exporting.
    #[arg(long, value_name = "URL")]
    pub(super) otlp_endpoint: Option<String>,
    /// `--oauth-issuer` and its options: `--listen` as an OAuth 2.1 resource server.
    #[command(flatten)]
    pub(super) oauth: OAuthArgs,
}

/// Where `airlock mcp`'s decisions are exported to, and who said so.
pub(crate) enum OtlpEndpoint {
    /// `--otlp-endpoint`: the gateway does not start without the export.
    Flag(String),
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, set for whatever runs in this environment: a collector the gateway
    /// cannot export to is a warning, not a reason not to start.
    Environment(String),
}

/// The collector `airlock mcp` exports its decisions to, when it runs the gateway and is given one.
pub(crate) fn otlp_endpoint(args: &McpArgs) -> Option<OtlpEndpoint> {
    if args.command.is_some() {
        return None;
    }
    match &args.run.otlp_endpoint {
        Some(endpoint) => Some(OtlpEndpoint::Flag(endpoint.clone())),
        None => std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
            .ok()
            .filter(|endpoint| !endpoint.trim().is_empty())
            .map(OtlpEndpoint::Environment),
    }
}

/// The gateway as an OAuth 2.1 resource server (the MCP authorization spec). Exclusive with the static
/// token: with `--oauth-issuer`, `--token-file` is refused and the `--token-env` variable must be unset.
#[derive(Debug, clap::Args)]
pub(crate) struct OAuthArgs {
    /// Admit OAuth access tokens (JWTs) of this issuer on `--listen`: signed by one of its keys, `iss` equal
    /// to this URL, `aud` naming this gateway, not expired. The keys are found by the issuer's RFC 8414 or
    /// OpenID Connect discovery (`jwks_uri`), unless `--jwks-file` gives them.
    #[arg(long, value_name = "URL", requires = "listen", conflicts_with = "token_file")]
    pub(super) oauth_issuer: Option<String>,
    /// The issuer's signing keys as a JWKS file (`{"keys": [...]}`), instead of fetching them.
    #[arg(long, value_name = "PATH", requires = "oauth_issuer")]
    pub(super) jwks_file: Option<PathBuf>,
    /// This gateway's public URL, as clients reach it (the protected resource's `resource`); by default
    /// `http://ADDR/mcp` for the `--listen` address.
    #[arg(long, value_name = "URL", requires = "oauth_issuer")]
    pub(super) oauth_resource: Option<String>,
    /// What a token's `aud` must contain; by default the resource URL.
    #[arg(long, value_name = "AUD", requires = "oauth_issuer")]
    pub(super) oauth_audience: Option<String>,
    /// The claims kept for the policy's identity conditions besides `sub` and `iss`, comma-separated
    /// (e.g. `groups,scope`; a space-separated `scope` or `scp` becomes a list).
    #[arg(long, value_name = "CLAIMS", requires = "oauth_issuer", value_delimiter = ',')]
    pub(super) oauth_claims: Vec<String>,
    /// The scopes the protected resource metadata lists as supported, comma-separated.
    #[arg(long, value_name = "SCOPES", requires = "oauth_issuer", value_delimiter = ',')]
    pub(super) oauth_scopes: Vec<String>,
    /// The signing algorithms admitted, comma-separated (default: every asymmetric one: RS256, RS384,
    /// RS512, PS256, PS384, PS512, ES256, ES384, EdDSA). HMAC algorithms are refused.
    #[arg(long, value_name = "ALGS", requires = "oauth_issuer", value_delimiter = ',')]
    pub(super) oauth_algorithms: Vec<String>,
}
