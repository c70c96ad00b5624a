//! `baton`: the front end people and agents type. It runs `baton submit` itself and hands every
//! other command to `batond` beside it (see the library's `front` module).
//!
//! Its own `main`, without std's start-up (the main thread's stack guard, found by reading
//! /proc/self/maps, and its overflow handler; SIGPIPE ignored): a tenth of what starting it
//! costs, for a process that lives a millisecond. A closed pipe ends it as it ends `cat`.

// Under `cargo test` libtest's harness brings its own `main` (`--bins` builds every binary as a
// test, with no tests in this one).
#![cfg_attr(not(test), no_main)]

#[cfg(not(test))]
#[unsafe(no_mangle)]
pub extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    let code = baton_gpu::run_front();
    // std flushes stdout at its exit; this `main` returns to the C runtime instead.
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::ffi::c_int::from(code)
}
