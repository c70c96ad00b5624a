//! `baton serve`: sets up the state directory, the store, the GPUs and the socket, then runs the
//! daemon until SIGTERM or SIGINT. One daemon per state directory (a lock file says so).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use baton_core::units::{parse_duration, parse_size};

use super::UsageError;
use crate::daemon::{Config, Daemon};
use crate::paths;
use crate::store::Store;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Simulate N GPUs of 80 GiB instead of asking NVML (default: `[daemon] sim_gpus` in
    /// config.toml, else NVML).
    #[arg(long, env = "BATON_SIM_GPUS", value_name = "N")]
    sim_gpus: Option<u32>,
    /// Serve every local user (run as root): socket under /run/baton, open to all; jobs run as
    /// their submitters, who may act only on their own jobs.
    #[arg(long)]
    system: bool,
    /// Where to put the socket (default: $BATON_HOME/baton.sock, or /run/baton/baton.sock with
    /// --system).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Time between SIGTERM and SIGKILL when a job is cancelled, hits its time limit or leaves
    /// processes behind (default: `[daemon] grace`, else 30s).
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    grace: Option<i64>,
    /// How long ended jobs stay in `baton status` without --all (default: `[daemon] recent`,
    /// else 1h).
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    recent: Option<i64>,
    /// Also serve Prometheus metrics (`GET /metrics`) over TCP on this address, e.g.
    /// 127.0.0.1:9464 (default: `[daemon] metrics_addr`). The socket always serves them.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Serve the web dashboard on this address, e.g. 127.0.0.1:8080 (default: `[daemon]
    /// web_addr`; none). Keep it on loopback: `baton dashboard` prints the login link, and an
    /// SSH port forward reaches it from elsewhere.
    #[arg(long, value_name = "HOST:PORT")]
    web_addr: Option<std::net::SocketAddr>,
    /// The cores jobs may use in all, before `[resources] reserve_cpus` (default:
    /// `[resources] cpus`, else the cores this daemon may run on).
    #[arg(long, env = "BATON_MACHINE_CPUS", value_name = "N")]
    cpus: Option<u32>,
    /// The memory jobs may use in all, before `[resources] reserve_memory` (default:
    /// `[resources] memory`, else the machine's).
    #[arg(long, env = "BATON_MACHINE_MEMORY", value_parser = parse_size, value_name = "SIZE")]
    memory: Option<u64>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BATON_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person watching; daemon.log and journald get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // Two malloc arenas, not glibc's eight per core: the blocking pool's threads (listings,
    // reports) would each keep what they once used, and the daemon is meant to stay small.
    // Freed memory is given back to the system past 32 MiB only, not glibc's 128 KiB: every
    // request, report and commit otherwise gave back its buffers and faulted them in again
    // (a tenth of the daemon's time for a stream of short jobs); and a fixed threshold for
    // allocating with mmap (4 MiB) keeps glibc from raising it as it goes.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
    }
    let is_root = rustix::process::geteuid().is_root();
    if args.system && !is_root {
        return Err(UsageError(
            "--system needs root: it runs jobs as the users who submit them".into(),
        )
        .into());
    }
    let home = if args.system && std::env::var_os("BATON_HOME").is_none() {
        PathBuf::from(paths::SYSTEM_HOME)
    } else {
        paths::user_home()
    };
    let socket = args.socket.clone().unwrap_or_else(|| {
        if args.system {
            PathBuf::from(paths::SYSTEM_SOCKET)
        } else {
            home.join("baton.sock")
        }
    });
    // Nothing baton creates is readable by others unless it says so below.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    fs::create_dir_all(home.join("jobs"))
        .with_context(|| format!("cannot create the state directory {}", home.display()))?;
    fs::set_permissions(&home, fs::Permissions::from_mode(0o700))?;

    let lock_path = home.join("daemon.lock");
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("cannot open {}", lock_path.display()))?;
    if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        let pid = fs::read_to_string(&lock_path)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
            .map(|p| format!(" (pid {p})"))
            .unwrap_or_default();
        return Err(UsageError(format!(
            "another baton daemon is already serving {}{pid}; stop it with `baton shutdown`, \
             or set BATON_HOME to use another state directory",
            home.display()
        ))
        .into());
    }
    // Who holds the lock, for that message and for `baton shutdown`'s clients.
    {
        use std::io::Write;
        let _ = lock.set_len(0);
        let _ = (&lock).write_all(format!("{}\n", std::process::id()).as_bytes());
    }

    let settings =
        crate::config::load(&home.join("config.toml")).map_err(|e| UsageError(e.to_string()))?;
    let mut store = Store::open(&home.join("baton.db"))?;
    store.checkpoint_in_background(&home.join("baton.db"))?;
    // Flags first, then config.toml's `[daemon]`, so that a daemon started by `baton submit`,
    // after a crash or by hand starts the same way.
    let sim_gpus = args.sim_gpus.or(settings.daemon.sim_gpus);
    let metrics_addr = args.metrics_addr.or(settings.daemon.metrics_addr);
    let web_addr = args.web_addr.or(settings.daemon.web_addr);
    let probe = crate::gpu::detect(sim_gpus, home.join("sim"));
    let uid = rustix::process::geteuid().as_raw();
    let containment = crate::executor::contain::Method::detect(
        settings.daemon.containment,
        &crate::daemon::tag_for(&home, uid),
    )
    .map_err(UsageError)?;
    tracing::info!("jobs are contained by {}", containment.describe());
    for admin in &settings.limits.admins {
        if crate::users::by_name(admin).is_none() {
            tracing::warn!("[limits] admins: no user is called {admin:?}");
        }
    }
    for user in settings.limits.users.keys() {
        if crate::users::by_name(user).is_none() {
            tracing::warn!("[limits.users.{user}]: no user is called {user:?}; it caps nobody");
        }
    }
    let host = settings
        .resources
        .host(args.cpus, args.memory, crate::config::detect_host())
        .map_err(UsageError)?;
    tracing::info!(
        "jobs may use {} CPUs and {} of memory; a job takes {} CPU{} unless it asks",
        host.capacity.cpus,
        baton_core::units::format_size(host.capacity.mem),
        host.default_cpus,
        if host.default_cpus == 1 { "" } else { "s" }
    );
    let config = Config {
        home: home.clone(),
        host,
        system: args.system,
        grace_ms: args.grace.or(settings.daemon.grace).unwrap_or(30_000),
        recent_ms: args.recent.or(settings.daemon.recent).unwrap_or(3_600_000),
        recent_shown: settings.daemon.recent_shown.unwrap_or(10),
        retention: settings.retention,
        waste: settings.waste,
        backend: settings.backend,
        containment,
        retries: settings.retries,
        sweeps: settings.sweeps.clone(),
        midrun: settings.midrun.policy(),
        min_wake_every: settings.midrun.min_wake_every,
        py_spy: settings.midrun.py_spy.clone(),
        connections: settings.limits.connection_limits(),
        limits: settings.limits,
    };
    let exe = std::env::current_exe().context("cannot find the baton binary")?;
    let daemon = Daemon::new(config, store, probe, exe)?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = bind(&socket, args.system)?;
        let (stop_metrics, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
        if let Some(addr) = metrics_addr {
            let tcp = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen for metrics on {addr}"))?;
            // The bound address, which differs from the asked one for port 0.
            let bound = tcp.local_addr().unwrap_or(addr);
            tracing::info!("serving Prometheus metrics on http://{bound}/metrics");
            let metrics = daemon.metrics.clone();
            // Tracked with the daemon's own tasks, so that its stop ends this one too.
            daemon.tasks.spawn(crate::tasks::Until::Stop, async move {
                let stopped = async {
                    let _ = metrics_stopped.await;
                };
                if let Err(e) = crate::metrics::serve_tcp(tcp, metrics, stopped).await {
                    tracing::error!("the metrics server failed: {e}");
                }
            });
        }
        let (stop_web, web_stopped) = tokio::sync::oneshot::channel::<()>();
        if let Some(addr) = web_addr {
            let tcp = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen for the dashboard on {addr}"))?;
            let bound = tcp.local_addr().unwrap_or(addr);
            let url = format!("http://{bound}");
            tracing::info!("serving the dashboard on {url} (`baton dashboard` logs you in)");
            *daemon.web_url.lock().unwrap_or_else(|p| p.into_inner()) = Some(url);
            let web = Arc::clone(&daemon);
            daemon.tasks.spawn(crate::tasks::Until::Stop, async move {
                let stopped = async {
                    let _ = web_stopped.await;
                };
                if let Err(e) = crate::web::serve_tcp(tcp, web, stopped).await {
                    tracing::error!("the dashboard server failed: {e}");
                }
            });
        }
        tracing::info!(socket = %socket.display(), home = %home.display(), "baton daemon ready");
        Arc::clone(&daemon)
            .run(listener, shutdown_signal())
            .await
            .context("the API server failed")?;
        let _ = stop_metrics.send(());
        let _ = stop_web.send(());
        let _ = fs::remove_file(&socket);
        drop(lock);
        Ok(ExitCode::SUCCESS)
    })
}

fn bind(socket: &std::path::Path, system: bool) -> anyhow::Result<tokio::net::UnixListener> {
    if let Some(dir) = socket.parent() {
        fs::create_dir_all(dir)?;
        if system {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
        }
    }
    // We hold the daemon lock, so a socket file left here is stale.
    let _ = fs::remove_file(socket);
    let listener = tokio::net::UnixListener::bind(socket)
        .with_context(|| format!("cannot listen on {}", socket.display()))?;
    let mode = if system { 0o666 } else { 0o600 };
    fs::set_permissions(socket, fs::Permissions::from_mode(mode))?;
    Ok(listener)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
