//! `baton`: the front end people and agents type. It runs `baton submit` itself and hands every
//! other command to `batond` beside it (see the library's `front` module).

fn main() -> std::process::ExitCode {
    baton_gpu::run_front()
}
