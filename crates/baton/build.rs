//! Links the unwinder statically (libgcc_eh) in place of the shared libgcc_s that Rust's std
//! names on glibc: `-lgcc_s` finds, first, a one-line linker script here that stands for
//! `-lgcc_eh`. Loading libgcc_s.so.1 and running its constructor (which asks the CPU for its
//! features, a trap to the hypervisor on a VM) was a sixth of what starting `baton` cost, and
//! `baton submit` is run hundreds of times in a row. Panics unwind as before.

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" && target == "gnu" {
        std::fs::write(out.join("libgcc_s.so"), "INPUT(-lgcc_eh)\n").expect("write to OUT_DIR");
        println!("cargo:rustc-link-search=native={}", out.display());
    }
    println!("cargo:rerun-if-changed=build.rs");
}
