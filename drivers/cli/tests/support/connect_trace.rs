//! Runs a real agent CLI under `strace`, so a test can prove that every connection the CLI
//! (and anything it started) opened went to the scripted model server and nowhere else.
//! Included with `#[path = "support/connect_trace.rs"] mod connect_trace;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Puts an executable named `name` in `dir/traced-bin` that runs `real` under `strace`,
/// logging every `connect` to `dir/connect.log`, and puts that directory first on the `PATH`
/// of `env`. Returns the log's path.
pub(crate) fn trace(real: &Path, name: &str, dir: &Path, env: &mut [(String, String)]) -> PathBuf {
    let bin = dir.join("traced-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("connect.log");
    let wrapper = bin.join(name);
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec strace -f -qq -e trace=connect -o '{}' '{}' \"$@\"\n",
            log.display(),
            real.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = env
        .iter_mut()
        .find(|(k, _)| k == "PATH")
        .expect("the CLI's environment sets PATH");
    path.1 = format!("{}:{}", bin.display(), path.1);
    log
}

/// Every internet `connect` call in the strace log, as logged.
pub(crate) fn connections(log: &Path) -> Vec<String> {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    log.lines()
        .filter(|l| l.contains("connect(") && (l.contains("AF_INET") || l.contains("AF_INET6")))
        .map(str::to_owned)
        .collect()
}

/// At least one connection was logged, and every one went to 127.0.0.1 on `port`.
pub(crate) fn assert_only_to(log: &Path, port: u16) {
    let seen = connections(log);
    assert!(!seen.is_empty(), "strace logged no connection");
    for line in &seen {
        assert!(
            line.contains("inet_addr(\"127.0.0.1\")") && line.contains(&format!("htons({port})")),
            "a connection elsewhere than the model server: {line}"
        );
    }
}
