//! Link settings for the `toolgate` binary.
//!
//! Packed relative relocations (`DT_RELR`). A position-independent executable carries one
//! 24-byte `.rela.dyn` entry for every pointer the loader must shift at start: about 37,000
//! here, 877 KiB that the loader reads once and the process then keeps resident as file
//! pages, the better part of a megabyte of an idle sidecar's memory. RELR writes the same
//! relocations as a bitmap of about 9 KiB; the address space is still randomized.
//!
//! The loader must know the format: glibc 2.36 or newer (Debian 12, the image's base). The
//! linker marks the binary with the `GLIBC_ABI_DT_RELR` version, so an older glibc refuses
//! it at start with a message naming that version rather than misloading it. Building for
//! such a system: `TOOLGATE_RELR=0 cargo build --release`. GNU ld packs on x86-64 from
//! 2.38 (Debian 12 has 2.40); a linker that doesn't know the option warns and links as
//! before.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=TOOLGATE_RELR");
    let target = |key: &str| std::env::var(key).unwrap_or_default();
    let glibc = target("CARGO_CFG_TARGET_OS") == "linux" && target("CARGO_CFG_TARGET_ENV") == "gnu";
    let wanted = std::env::var("TOOLGATE_RELR").as_deref() != Ok("0");
    if glibc && wanted {
        // Binaries only: the shipped executable is what stays resident; tests and examples
        // link as before.
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
