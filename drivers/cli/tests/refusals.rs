//! Inputs `agentrun run` refuses before anything runs: limits past their documented maxima
//! (they used to overflow) and result-sink variables the child needs for itself.

use std::process::Output;

#[path = "support/sandbox.rs"]
mod sandbox;

/// `agentrun run ARGS` on a fresh store.
fn run(args: &[&str]) -> Output {
    sandbox::Sandbox::new().run(&[&["run"][..], args].concat())
}

fn refused(args: &[&str], message: &str) {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!matches!(o.status.code(), Some(0 | 101)), "{args:?}: {err}");
    assert!(err.contains(message), "{args:?}: {err}");
    assert!(o.stdout.is_empty(), "{args:?}: nothing ran");
}

#[test]
fn limits_past_their_maxima_are_refused_and_the_largest_accepted_ones_work() {
    let max = "18446744073709551615";
    refused(
        &[
            "--max-bytes",
            max,
            "--max-payload-bytes",
            max,
            "--",
            "echo",
            "x",
        ],
        "max_bytes is 18446744073709551615; it must be at most 16777216 (16 MiB)",
    );
    refused(
        &["--max-payload-bytes", "16777217", "--", "echo", "x"],
        "max_payload_bytes is 16777217; it must be at most 16777216",
    );
    refused(
        &["--tail-lines", max, "--", "echo", "x"],
        "tail_lines is 18446744073709551615; it must be at most 16777216",
    );
    let edge = "16777216";
    let o = run(&[
        "--max-bytes",
        edge,
        "--max-payload-bytes",
        edge,
        "--max-lines",
        edge,
        "--tail-lines",
        edge,
        "--",
        "seq",
        "1",
        "100000",
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let want: String = (1..=100_000).map(|i| format!("{i}\n")).collect();
    assert!(String::from_utf8(o.stdout).unwrap().contains(&want));
}

#[test]
fn a_sink_variable_the_child_needs_is_refused_by_name() {
    for var in ["PATH", "HOME", "LD_PRELOAD", "DYLD_INSERT_LIBRARIES"] {
        refused(
            &["--sink", "--sink-var", var, "--", "echo", "x"],
            &format!("invalid result-sink variable name \"{var}\""),
        );
    }
    refused(
        &["--sink", "--sink-var", "PATH", "--", "echo", "x"],
        "the program needs PATH for itself",
    );
    refused(
        &["--sink", "--sink-var", "MY-VAR", "--", "echo", "x"],
        "a letter or '_' followed by letters, digits or '_'",
    );
}
