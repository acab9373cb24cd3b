//! Claude Code's `api_error` result with HTTP 429 is a rate limit and with 529 or 503 an
//! overload, so auto mode and `agent --max-retries` wait them out; any other 5xx is a server
//! error (the full taxonomy is decoded with the rest of the dialect).

// The shared helpers read fixtures from disk; the tests themselves do no I/O.
#![allow(clippy::disallowed_methods)]

mod harness_common;

use agentrun_core::harness::{FailureKind, Harness};
use harness_common::{complete, interpret};

fn kind_of_status(status: u16) -> Option<FailureKind> {
    let stream = format!(
        r#"{{"type":"system","subtype":"init","session_id":"s1","model":"claude-sonnet-4-5"}}
{{"type":"result","subtype":"success","is_error":true,"api_error_status":{status},"terminal_reason":"api_error","result":"API Error: {status}","num_turns":1,"total_cost_usd":0,"session_id":"s1"}}
"#
    );
    let (_, interp) = interpret(Harness::Claude, None, stream.as_bytes());
    complete(interp).outcome.failure_kind
}

#[test]
fn a_claude_api_error_429_is_rate_limited_529_or_503_overloaded_and_500_a_server_error() {
    assert_eq!(kind_of_status(429), Some(FailureKind::RateLimited));
    assert_eq!(kind_of_status(529), Some(FailureKind::Overloaded));
    assert_eq!(kind_of_status(503), Some(FailureKind::Overloaded));
    assert_eq!(kind_of_status(500), Some(FailureKind::ServerError));
}
