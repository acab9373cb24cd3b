//! Auto mode on both drivers: the same scenario through `agentrun_smol` and
//! `agentrun_tokio`'s `AutoModeRunner` and `AutoModeChannel` (same names, same API), with a
//! `sh` script speaking Claude Code's stream as the harness.

use std::fs;
use std::path::Path;
use std::time::SystemTime;

use agentrun_core::auto_mode::{AutoMode, Settings};
use agentrun_core::harness::Harness;
use agentrun_core::turn::run_session_loop;
use agentrun_fs::Store;
use agentrun_fs::auto_session::SessionDir;

/// A Claude-dialect harness: records its argv and prompt per call, answers with session id
/// `script-session`, writes `COMPLETE` to the sink on call 4, exits with the code listed in
/// `<dir>/codes` for its call (default 0).
fn write_harness(dir: &Path) -> std::path::PathBuf {
    let script = format!(
        r#"#!/bin/sh
d='{dir}'
n=$(cat "$d/n" 2>/dev/null || echo 0); n=$((n+1)); echo "$n" > "$d/n"
printf '%s\n' "$@" > "$d/argv-$n"
for a; do last="$a"; done
printf '%s' "$last" > "$d/prompt-$n"
echo '{{"type":"system","subtype":"init","session_id":"script-session","model":"m"}}'
if [ "$n" = 4 ]; then printf 'COMPLETE' > "$AGENTRUN_RESULT_SINK"; fi
echo '{{"type":"result","subtype":"success","is_error":false,"result":"turn '"$n"'","session_id":"script-session"}}'
code=$(sed -n "${{n}}p" "$d/codes" 2>/dev/null)
exit "${{code:-0}}"
"#,
        dir = dir.display()
    );
    let path = dir.join("claude");
    fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn settings(workspace: &Path) -> Settings {
    Settings {
        objective: "make it so".into(),
        harness: "claude".into(),
        model: None,
        effort: None,
        harness_args: vec![],
        verify: Some("test -f marker".into()),
        workspace: Some(workspace.to_string_lossy().into_owned()),
        max_turns: 5,
        result_sink_var: "AGENTRUN_RESULT_SINK".into(),
        harness_resumes: true,
        max_retries: 0,
        retry_backoff_ms: 30_000,
    }
}

struct Case {
    tmp: tempfile::TempDir,
    store: Store,
    dir: SessionDir,
    machine: Option<AutoMode>,
    launch: agentrun_smol::HarnessLaunch,
}

fn case() -> Case {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("store")).unwrap();
    let calls = tmp.path().join("calls");
    fs::create_dir(&calls).unwrap();
    let program = write_harness(&calls);
    let workspace = tmp.path().join("work");
    fs::create_dir(&workspace).unwrap();
    fs::write(workspace.join("marker"), "").unwrap();
    let dir = SessionDir::create(tmp.path().join("session")).unwrap();
    dir.drop_instruction(b"Please keep the API stable.")
        .unwrap();
    let machine = AutoMode::new("s-1", settings(&workspace), SystemTime::now()).unwrap();
    let launch = agentrun_smol::HarnessLaunch::new()
        // The runner looks the harness up on the PATH it gives the harness.
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", program.parent().unwrap().display()),
        )
        .workspace(workspace);
    Case {
        tmp,
        store,
        dir,
        machine: Some(machine),
        launch,
    }
}

impl Case {
    /// What a driver consumes; `tmp` and `dir` stay for the checks.
    fn take(&mut self) -> Case {
        Case {
            tmp: tempfile::tempdir().unwrap(),
            store: self.store.clone(),
            dir: self.dir.clone(),
            machine: self.machine.take(),
            launch: self.launch.clone(),
        }
    }
}

fn check(case: &Case, state: &agentrun_core::auto_mode::AutoModeState, turns: u64) {
    let calls = case.tmp.path().join("calls");
    let read = |name: &str| fs::read_to_string(calls.join(name)).unwrap();
    assert_eq!(turns, 4);
    assert_eq!(state.status.as_str(), "completed");
    assert_eq!(state.verified, Some(true));
    assert_eq!(state.harness_session_id.as_deref(), Some("script-session"));
    assert!(!read("argv-1").contains("--resume"));
    for n in 2..=4 {
        assert!(read(&format!("argv-{n}")).contains("--resume\nscript-session\n"));
    }
    assert!(read("prompt-3").contains("> Please keep the API stable."));
    let on_disk = case.dir.read_state().unwrap();
    assert_eq!(&on_disk, state);
    assert!(
        fs::read_to_string(case.dir.log_path())
            .unwrap()
            .contains("verified")
    );
    assert!(state.turns.iter().all(|t| !t.artifacts.is_empty()));
}

/// Runs `case` to its end on one driver crate: the state, the turns run, the abort reason
/// and the exit code.
macro_rules! drive {
    ($driver:ident, $runtime:expr, $case:expr) => {{
        let Case {
            store,
            dir,
            machine,
            launch,
            ..
        } = $case;
        async move {
            let runner = $driver::Runner::new(store);
            let mut session =
                $driver::AutoModeRunner::new(runner.clone(), Harness::Claude, launch, "s-1");
            let mut channel =
                $driver::AutoModeChannel::new(machine.unwrap(), dir, runner, $runtime)
                    .await
                    .unwrap();
            let turns = run_session_loop(&mut session, &mut channel, || async {})
                .await
                .unwrap();
            let abort = channel.abort().map(str::to_owned);
            (channel.state().clone(), turns, abort, channel.exit_code())
        }
    }};
}

fn tokio_block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn smol_drives_a_session_to_verified_completion() {
    let mut case = case();
    let run = drive!(agentrun_smol, agentrun_smol::SmolRuntime, case.take());
    let (state, turns, abort, code) = smol::block_on(run);
    assert_eq!((abort, code), (None, 0));
    check(&case, &state, turns);
}

#[test]
fn tokio_drives_a_session_to_verified_completion() {
    let mut case = case();
    let run = drive!(agentrun_tokio, agentrun_tokio::TokioRuntime, case.take());
    let (state, turns, abort, code) = tokio_block_on(run);
    assert_eq!((abort, code), (None, 0));
    check(&case, &state, turns);
}

#[test]
fn a_required_turn_failure_aborts_on_both_drivers() {
    for tokio_driver in [false, true] {
        let mut case = case();
        fs::write(case.tmp.path().join("calls/codes"), "0\n9\n").unwrap();
        let (_, _, abort, code) = if tokio_driver {
            tokio_block_on(drive!(
                agentrun_tokio,
                agentrun_tokio::TokioRuntime,
                case.take()
            ))
        } else {
            smol::block_on(drive!(
                agentrun_smol,
                agentrun_smol::SmolRuntime,
                case.take()
            ))
        };
        assert_eq!(code, 9, "tokio: {tokio_driver}");
        assert!(abort.unwrap().contains("plan"), "tokio: {tokio_driver}");
    }
}
