//! `agentrun interpret` on a stream naming more models than a model list keeps: the first
//! ones are shown, the rest counted, in the human output and the JSON.

use serde_json::Value;

#[path = "support/sandbox.rs"]
mod sandbox;

#[test]
fn models_beyond_the_cap_are_counted_in_both_outputs() {
    let sb = sandbox::Sandbox::new();
    let path = sb.path("many.jsonl");
    let stream: String = (0..100)
        .map(|i| {
            format!(r#"{{"type":"assistant","message":{{"model":"m{i}","content":[]}}}}"#) + "\n"
        })
        .collect();
    std::fs::write(&path, stream).expect("write");
    let p = path.to_str().unwrap();
    // The stream has no result event: a session that did not finish, so exit 1.
    let o = sb.run(&["interpret", "--harness", "claude", p]);
    assert_eq!(o.status.code(), Some(1), "{}", sandbox::stderr(&o));
    let out = sandbox::stdout(&o);
    let first = out.lines().next().expect("models line");
    assert!(first.starts_with("observed models: m0, m1, "), "{first}");
    assert!(first.ends_with(", m63 (and 36 more)"), "{first}");
    let o = sb.run(&["interpret", "--harness", "claude", "--json", p]);
    assert_eq!(o.status.code(), Some(1), "{}", sandbox::stderr(&o));
    let last = sandbox::stdout(&o)
        .lines()
        .last()
        .expect("final object")
        .to_owned();
    let v: Value = serde_json::from_str(&last).expect("json");
    assert_eq!(v["observed_models"].as_array().map(Vec::len), Some(64));
    assert_eq!(v["observed_models_omitted"], 36);
    assert_eq!(v["report"]["models_omitted"], 36);
}
