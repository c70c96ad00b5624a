//! `batond`: the whole of baton (the daemon, the supervisor and every command). People and
//! agents run `baton`, the front end beside it, which hands it every command but `submit`.

fn main() -> std::process::ExitCode {
    baton_gpu::run_full()
}
