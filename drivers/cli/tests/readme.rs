//! The README, followed literally on a fresh store: install with the README's command into a
//! temporary root, run the main job as written (through `sh`, so `agentrun` is found on
//! `PATH` like a user's), run the `agentrun read` command it prints, and get the continuation.
//!
//! Cost: the install builds with `--debug` appended (no release optimizations; set
//! `AGENTRUN_README_RELEASE=1` to run the command exactly as written), in a directory of the
//! workspace's target directory kept for it: `cargo install` resolves features for the CLI
//! alone, so its artifacts differ from the test build's anyway, and a directory per checkout
//! keeps several checkouts sharing one target directory from using each other's artifacts.
//! The first run compiles the dependencies once (about two minutes on two cores); later runs
//! rebuild only what changed.

use std::path::{Path, PathBuf};
use std::process::Command;

const INSTALL: &str = "cargo install --path drivers/cli --locked";
/// The README's quicker install for trying agentrun out: what this test runs by default.
const INSTALL_DEBUG: &str = "cargo install --debug --path drivers/cli --locked";
const MAIN_JOB: &str = "agentrun run seq 1 1000000";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// `<target>/readme-install/<this checkout's path>`, where `<target>` is the target directory
/// this test was built in (`<target>/debug/agentrun`).
fn install_target_dir() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_agentrun"));
    let target = exe.parent().and_then(Path::parent).unwrap();
    let checkout: String = workspace()
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    target.join("readme-install").join(checkout)
}

#[test]
fn the_readme_install_and_main_job_work_as_written() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    for command in [INSTALL, INSTALL_DEBUG, MAIN_JOB] {
        assert!(
            readme.contains(&format!("```sh\n{command}\n```")),
            "the README no longer says `{command}`"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut install = Command::new(cargo);
    install
        .current_dir(workspace())
        .args(INSTALL.split_whitespace().skip(1))
        .arg("--root")
        .arg(&root)
        .env("CARGO_TARGET_DIR", install_target_dir());
    if std::env::var_os("AGENTRUN_README_RELEASE").is_none() {
        install.arg("--debug");
    }
    let o = install.output().unwrap();
    assert!(
        o.status.success(),
        "install failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut installed: Vec<String> = std::fs::read_dir(root.join("bin"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    installed.sort();
    assert_eq!(installed, ["agentrun"], "only agentrun is installed");

    let path = format!(
        "{}:{}",
        root.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let shell = |line: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(line)
            .env("PATH", &path)
            .env("HOME", &home)
            .env_remove("AGENTRUN_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_CONFIG_HOME")
            .output()
            .unwrap()
    };
    let main = shell(MAIN_JOB);
    let stderr = String::from_utf8_lossy(&main.stderr).into_owned();
    assert_eq!(main.status.code(), Some(0), "{stderr}");
    let stdout = String::from_utf8(main.stdout).unwrap();
    let head: String = (1..=2000).map(|i| format!("{i}\n")).collect();
    assert!(stdout.starts_with(&format!(
        "[stdout]\n{head}[Truncated. Read more: read(filePath=\"artifact://"
    )));
    assert!(stdout.contains("/stdout\", offset=2000)]"), "{stdout:.300}");

    // The printed command, as printed.
    let read = stderr
        .lines()
        .find_map(|l| l.strip_prefix("agentrun: rest of stdout: "))
        .unwrap_or_else(|| panic!("no read command in {stderr}"));
    assert!(
        read.starts_with("agentrun read artifact://") && read.ends_with("/stdout --offset 2000")
    );
    let page = shell(read);
    assert_eq!(
        page.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&page.stderr)
    );
    let continuation: String = (2001..=4000).map(|i| format!("{i}\n")).collect();
    assert_eq!(String::from_utf8(page.stdout).unwrap(), continuation);
    assert!(
        String::from_utf8_lossy(&page.stderr)
            .contains("lines 2001-4000 of 1000000 lines; next: agentrun read artifact://"),
        "{}",
        String::from_utf8_lossy(&page.stderr)
    );
    // The store was created fresh, in the default location.
    assert!(home.join(".local/share/agentrun/records").is_dir());
}
