//! The model is told how the program ended: a non-zero exit code or the signal that killed it
//! heads the rendering (live and replayed), and the record's status field is named for what
//! it is, the capture status.

#[path = "support/sandbox.rs"]
mod sandbox;

#[test]
fn a_non_zero_exit_or_a_signal_is_stated_in_the_model_text() {
    let env = sandbox::Sandbox::new();
    for (script, code, head) in [
        ("echo hi; exit 3", 3, "[The program exited with code 3]\n"),
        (
            "echo hi; kill -9 $$",
            137,
            "[The program was killed by signal 9 (SIGKILL)]\n",
        ),
        ("echo hi", 0, ""),
    ] {
        let o = env.run(&["run", "--", "sh", "-c", script]);
        assert_eq!(o.status.code(), Some(code), "{script}");
        let text = String::from_utf8(o.stdout).unwrap();
        assert!(
            text.starts_with(&format!("{head}[stdout]\nhi\n")),
            "{script}: {text}"
        );
        // The record says it too, so a replay renders the same text.
        let o = env.run(&["run", "--json", "--", "sh", "-c", script]);
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let record = &json["record"];
        assert_eq!(record["capture_status"], "succeeded", "{script}");
        assert!(record.get("status").is_none(), "{script}");
        let replayed: agentrun_core::ResultRecord = serde_json::from_value(record.clone()).unwrap();
        assert!(replayed.render().starts_with(head), "{script}");
    }
}
