//! The `Dockerfile`, checked by reading it (no Docker engine runs here): a multi-stage
//! build of exactly the locked dependencies, a runtime stage that runs the one `toolgate`
//! binary as the numeric non-root user the injector and the chart also use, and a build
//! context holding every file the crate embeds. And the binary it ships, read as ELF: its
//! relocations packed as `build.rs` asks.

use std::path::Path;

use toolgate::inject::UID;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One instruction: its keyword (upper case) and its arguments, continuation lines joined.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let (keyword, args) = pending
            .split_once(char::is_whitespace)
            .unwrap_or((&pending, ""));
        out.push((keyword.to_ascii_uppercase(), args.trim().to_string()));
        pending.clear();
    }
    out
}

/// The instructions of each stage, split at `FROM`.
fn stages(text: &str) -> Vec<Vec<(String, String)>> {
    let mut stages: Vec<Vec<(String, String)>> = Vec::new();
    for instruction in instructions(text) {
        if instruction.0 == "FROM" {
            stages.push(Vec::new());
        }
        stages
            .last_mut()
            .expect("the Dockerfile starts with FROM")
            .push(instruction);
    }
    stages
}

fn dockerfile() -> String {
    std::fs::read_to_string(root().join("Dockerfile")).unwrap()
}

#[test]
fn the_build_is_multi_stage_and_locked() {
    let stages = stages(&dockerfile());
    assert!(stages.len() >= 2, "a builder stage and a runtime stage");
    let builder = &stages[0];
    let from = &builder[0].1;
    assert!(
        from.starts_with("rust:"),
        "builds in the Rust image: {from}"
    );
    assert!(from.to_ascii_lowercase().ends_with(" as builder"), "{from}");
    let builds: Vec<&String> = builder
        .iter()
        .filter(|(k, a)| k == "RUN" && a.contains("cargo build"))
        .map(|(_, a)| a)
        .collect();
    assert_eq!(builds.len(), 1);
    for flag in ["--release", "--locked"] {
        assert!(builds[0].contains(flag), "cargo build without {flag}");
    }
    // The builder's toolchain is at least the crate's rust-version.
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let wanted = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .unwrap()
        .trim_matches('"');
    let image = from["rust:".len()..].split(['-', ' ']).next().unwrap();
    let version = |v: &str| -> Vec<u32> { v.split('.').map(|p| p.parse().unwrap()).collect() };
    assert!(
        version(image) >= version(wanted),
        "rust:{image} is older than {wanted}"
    );
}

#[test]
fn the_runtime_runs_the_one_binary_as_the_shared_non_root_uid() {
    let stages = stages(&dockerfile());
    let runtime = stages.last().unwrap();
    let base = &runtime[0].1;
    assert!(
        base.contains("distroless/cc") || base.contains("-slim"),
        "a minimal runtime image: {base}"
    );
    let users: Vec<&String> = runtime
        .iter()
        .filter(|(k, _)| k == "USER")
        .map(|(_, a)| a)
        .collect();
    assert_eq!(users.len(), 1, "one USER in the runtime stage");
    let mut ids = users[0].split(':').map(|id| {
        id.parse::<i64>()
            .unwrap_or_else(|_| panic!("USER {id} is not numeric (runAsNonRoot can't check names)"))
    });
    let uid = ids.next().unwrap();
    assert_ne!(uid, 0, "USER must not be root");
    assert_eq!(
        uid, UID,
        "the image's user is the one the injector and chart set"
    );
    if let Some(gid) = ids.next() {
        assert_eq!(gid, UID);
    }
    let entrypoint = runtime
        .iter()
        .find(|(k, _)| k == "ENTRYPOINT")
        .map(|(_, a)| a)
        .expect("an ENTRYPOINT");
    let entrypoint: Vec<String> =
        serde_json::from_str(entrypoint).expect("ENTRYPOINT in exec (JSON) form");
    assert_eq!(entrypoint.len(), 1);
    assert!(entrypoint[0].ends_with("/toolgate"), "{entrypoint:?}");
    let copied = runtime.iter().any(|(k, a)| {
        k == "COPY" && a.starts_with("--from=builder") && a.ends_with(&entrypoint[0])
    });
    assert!(
        copied,
        "the binary is copied from the builder to {}",
        entrypoint[0]
    );
    assert!(
        !runtime.iter().any(|(k, _)| k == "RUN"),
        "nothing runs in the runtime stage (no shell there)"
    );
}

/// Files `src/` embeds with `include_str!`/`include_bytes!` must be in the build context
/// and copied into the builder, or the image build fails.
#[test]
fn the_builder_gets_every_embedded_file() {
    let text = dockerfile();
    let builder = &stages(&text)[0];
    let copied: Vec<String> = builder
        .iter()
        .filter(|(k, _)| k == "COPY")
        .flat_map(|(_, a)| a.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect();
    // build.rs too: without it the image would build, silently without its link settings.
    for needed in ["Cargo.toml", "Cargo.lock", "build.rs", "src"] {
        assert!(copied.iter().any(|c| c == needed), "{needed} is not copied");
    }
    let ignored = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    let ignored: Vec<&str> = ignored.lines().map(str::trim).collect();
    for must in ["target", ".tools", ".git"] {
        assert!(
            ignored.contains(&must),
            ".dockerignore should leave out {must}"
        );
    }
    let mut folders = Vec::new();
    collect_embedded(&root().join("src"), &mut folders);
    assert!(!folders.is_empty());
    for folder in folders {
        assert!(
            copied.contains(&folder),
            "src/ embeds files from {folder}/, which the builder does not COPY"
        );
        assert!(
            !ignored.contains(&folder.as_str()),
            "{folder} is in .dockerignore"
        );
    }
}

/// The top-level folders of the files `src/` embeds.
fn collect_embedded(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_embedded(&path, out);
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for part in text.split("include_").skip(1) {
            let Some(rest) = part
                .strip_prefix("str!(\"")
                .or_else(|| part.strip_prefix("bytes!(\""))
            else {
                continue;
            };
            let relative = rest.split('"').next().unwrap();
            let file = path.parent().unwrap().join(relative);
            let file = std::fs::canonicalize(&file).unwrap();
            let inside = file
                .strip_prefix(std::fs::canonicalize(root()).unwrap())
                .unwrap();
            let top = inside.components().next().unwrap();
            let top = top.as_os_str().to_string_lossy().into_owned();
            if !out.contains(&top) {
                out.push(top);
            }
        }
    }
}

/// The binary packs its relocations (`build.rs`): the dynamic section has `DT_RELR`.
/// Read from the ELF headers directly, so the check needs no binutils. x86-64 only: GNU ld
/// packs there since 2.38, while on other architectures older versions ignore the option.
#[cfg(all(target_os = "linux", target_env = "gnu", target_arch = "x86_64"))]
#[test]
fn the_binary_packs_its_relative_relocations() {
    if std::env::var("TOOLGATE_RELR").as_deref() == Ok("0") {
        return; // built without, on purpose
    }
    const PT_DYNAMIC: u32 = 2;
    const DT_RELR: u64 = 36;
    let elf = std::fs::read(env!("CARGO_BIN_EXE_toolgate")).unwrap();
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    assert_eq!(&elf[..4], b"\x7fELF");
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
    let dynamic = (0..phnum)
        .map(|i| phoff + i * phentsize)
        .find(|&ph| u32_at(ph) == PT_DYNAMIC)
        .expect("a dynamically linked binary");
    let (offset, size) = (
        u64_at(dynamic + 0x08) as usize,
        u64_at(dynamic + 0x20) as usize,
    );
    let tags: Vec<u64> = (offset..offset + size)
        .step_by(16)
        .map(u64_at)
        .take_while(|&tag| tag != 0)
        .collect();
    assert!(
        tags.contains(&DT_RELR),
        "no DT_RELR in the binary's dynamic section: build.rs's link argument was lost"
    );
}
