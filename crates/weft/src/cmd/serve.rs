//! `weft serve`: its arguments; the server is `weft_server`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use clap::Args;
use weft_host::Host;
use weft_server::ServeConfig;

use crate::store::CliStore;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The agent files served as assistants: files, or directories whose `.yaml`, `.yml` and
    /// `.json` agent files are all taken (default: the current directory).
    #[arg(long, default_value = ".")]
    pub agents: Vec<PathBuf>,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:2024")]
    pub listen: SocketAddr,
    /// A file of API keys, one `KEY USER` pair per line (`#` starts a comment). `WEFT_API_KEYS`
    /// (`KEY=USER,KEY=USER`) adds more.
    #[arg(long)]
    pub keys: Option<PathBuf>,
    /// The largest request body accepted (bytes).
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body: usize,
    /// Runs one user may have going at once (more are refused with 429).
    #[arg(long, default_value_t = 100)]
    pub max_runs_per_user: usize,
    /// A quota file (YAML: a `default` quota and `users`' own; tokens and cost per UTC day and
    /// month, runs at once): a user at their quota is refused with 429, and their runs stop at
    /// it; counted in the store across every server and worker on it (see docs/budgets.md).
    #[arg(long)]
    pub quotas: Option<PathBuf>,
    /// An origin whose pages may call the API from a browser (CORS), as `scheme://host[:port]`
    /// (e.g. `http://localhost:5173`), or `*` for any; repeat for more. None by default.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
    /// Print the API's OpenAPI document (what `/openapi.json` answers) and exit.
    #[arg(long)]
    pub openapi: bool,
}

/// `weft serve` read and checked, before the session store is opened (a mistake in any of it
/// leaves no store behind): the quota file, the keys, the allowed origins and the agent files,
/// and the address bound.
pub struct Prepared {
    host: Host,
    server: weft_server::Prepared,
}

/// Prints the OpenAPI document (`--openapi`: `Ok(None)`), or reads and checks everything the
/// server needs but its store.
pub async fn prepare(host: &Host, a: ServeArgs) -> Result<Option<Prepared>> {
    if a.openapi {
        let doc = format!("{:#}\n", weft_server::openapi_document());
        std::io::Write::write_all(&mut std::io::stdout().lock(), doc.as_bytes())
            .map_err(|e| anyhow::anyhow!("cannot write the OpenAPI document: {e}"))?;
        return Ok(None);
    }
    let host = with_quotas(host, a.quotas.as_deref())?;
    let config = ServeConfig {
        agents: a.agents,
        listen: a.listen,
        keys: a.keys,
        max_body: a.max_body,
        max_runs_per_user: a.max_runs_per_user,
        cors_origins: a.cors_origins,
    };
    let server = weft_server::Server::prepare(config).await?;
    Ok(Some(Prepared { host, server }))
}

/// Serves until SIGTERM or Ctrl-C.
pub async fn run(p: Prepared, store: Arc<CliStore>) -> Result<u8> {
    weft_server::Server::on(p.host, store, p.server)
        .run()
        .await?;
    Ok(0)
}

/// `host` with the quota file at `path` (read and checked: a mistake names its line and field).
pub fn with_quotas(host: &Host, path: Option<&std::path::Path>) -> Result<Host> {
    let mut host = host.clone();
    if let Some(p) = path {
        host.quotas = Some(Arc::new(weft_host::load::quotas(p)?));
    }
    Ok(host)
}
