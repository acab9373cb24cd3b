//! One exit policy for every front end: a program that cannot start gets the same code
//! whether it is run, launched as an agent's harness, or launched by auto mode; 127 for a
//! program that does not exist (a name too long to name any file included), 126 for one that
//! cannot be executed.

use std::future::IntoFuture;
use std::os::unix::fs::PermissionsExt;

use agentrun_core::harness::Harness;
use agentrun_core::process::RunOptions;
use agentrun_core::turn::{AgentSession, TurnError};
use agentrun_fs::Store;
use agentrun_smol::{AgentError, AgentOptions, HarnessLaunch, SpawnFailure};

/// The code each way of starting `program` gives.
fn codes(store: &Store, program: &str) -> [Option<u8>; 2] {
    let runner = agentrun_smol::Runner::new(store.clone());
    smol::block_on(async {
        let run = match runner.run(RunOptions::new(program)).into_future().await {
            Err(e) => e.exit_code(),
            Ok(result) => panic!("{program:.20} ran: {:?}", result.exit),
        };
        let agent = AgentOptions::new(Harness::Claude, "hello").program(program);
        let agent = match runner.agent(agent).into_future().await {
            Err(AgentError::Run(e)) => e.exit_code(),
            other => panic!("{program:.20}: {other:?}"),
        };
        [run, agent]
    })
}

#[test]
fn a_program_that_cannot_start_gets_one_code_on_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("store")).unwrap();
    let long = "a".repeat(5000);
    for program in [
        long.clone(),
        format!("/{long}"),
        format!("./{long}"),
        "no-such-program-anywhere".to_owned(),
    ] {
        assert_eq!(codes(&store, &program), [Some(127); 2], "{program:.20}");
    }
    let script = dir.path().join("not-executable");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(codes(&store, script.to_str().unwrap()), [Some(126); 2]);
    let err = smol::block_on(
        agentrun_smol::Runner::new(store.clone())
            .run(RunOptions::new(dir.path()))
            .into_future(),
    )
    .unwrap_err();
    assert_eq!(err.spawn_failure(), Some(SpawnFailure::IsDirectory));
    assert_eq!(err.exit_code(), Some(126));
}

#[test]
fn auto_mode_gives_a_harness_that_cannot_start_the_same_code() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("store")).unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let launch = HarnessLaunch::new().env("PATH", empty.display().to_string());
    let runner = agentrun_smol::Runner::new(store);
    let mut session = agentrun_smol::AutoModeRunner::new(runner, Harness::Claude, launch, "s-1");
    match smol::block_on(session.run_turn("hello")) {
        Err(TurnError::Spawn {
            exit_code, reason, ..
        }) => {
            assert_eq!(exit_code, 127);
            assert!(reason.contains("install the claude CLI"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}
