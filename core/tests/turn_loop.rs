//! The generic turn loop: the `TurnOutput` contract table, the `AgentSession` contract and
//! the strict next_prompt → run_turn → publish_output ordering.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use agentrun_core::harness::Usage;
use agentrun_core::turn::{
    AgentSession, Channel, ChannelError, LoopError, NextPrompt, TurnError, TurnOutput,
    run_session_loop,
};
use futures_lite::future::block_on;

#[test]
fn turn_output_contract_table() {
    let plain = TurnOutput::from_text("hello");
    assert_eq!(plain.text(), "hello");
    assert_eq!(plain.exit_code(), None);

    let coded = TurnOutput::from_text("hello").with_exit_code(3);
    assert_eq!(coded.text(), "hello");
    assert_eq!(coded.exit_code(), Some(3));

    let twice = TurnOutput::from_text("hello")
        .with_exit_code(3)
        .with_exit_code(0);
    assert_eq!(twice.text(), "hello");
    assert_eq!(twice.exit_code(), Some(0));

    // Negative and extreme codes are data, carried as they are.
    assert_eq!(
        TurnOutput::from_text("")
            .with_exit_code(i32::MIN)
            .exit_code(),
        Some(i32::MIN)
    );
}

#[test]
fn additive_fields_default_empty_and_leave_the_contract_alone() {
    let out = TurnOutput::from_text("answer");
    assert_eq!(out.result(), None);
    assert_eq!(out.harness_session_id(), None);
    assert!(out.models().is_empty());
    assert!(out.usage().is_none());
    assert!(out.artifacts().is_empty());

    let usage = Usage {
        input_tokens: 10,
        ..Usage::default()
    };
    let full = TurnOutput::from_text("answer")
        .with_exit_code(1)
        .with_result("COMPLETE")
        .with_harness_session_id("sess-1")
        .with_models(vec!["m".into()])
        .with_usage(usage.clone())
        .with_artifacts(vec!["artifact://x".into()]);
    assert_eq!(full.text(), "answer");
    assert_eq!(full.exit_code(), Some(1));
    assert_eq!(full.result(), Some("COMPLETE"));
    assert_eq!(full.harness_session_id(), Some("sess-1"));
    assert_eq!(full.models(), ["m".to_owned()]);
    assert_eq!(full.usage(), Some(&usage));
    assert_eq!(full.artifacts(), ["artifact://x".to_owned()]);
}

type Journal = Rc<RefCell<Vec<String>>>;

/// A session that answers each prompt with `answer:<prompt>` and the scripted exit codes.
struct ScriptedSession {
    id: String,
    codes: VecDeque<Result<i32, TurnError>>,
    journal: Journal,
}

impl AgentSession for ScriptedSession {
    async fn run_turn(&mut self, prompt: &str) -> Result<TurnOutput, TurnError> {
        self.journal.borrow_mut().push(format!("run_turn {prompt}"));
        let code = self.codes.pop_front().unwrap_or(Ok(0))?;
        Ok(TurnOutput::from_text(format!("answer:{prompt}")).with_exit_code(code))
    }

    fn session_id(&self) -> &str {
        &self.id
    }
}

/// A channel serving scripted `NextPrompt`s and recording what it was given.
struct ScriptedChannel {
    script: VecDeque<NextPrompt>,
    journal: Journal,
}

impl Channel for ScriptedChannel {
    fn id(&self) -> &str {
        "scripted"
    }

    async fn publish_output(&mut self, output: &TurnOutput) -> Result<(), ChannelError> {
        self.journal.borrow_mut().push(format!(
            "publish_output {} {:?}",
            output.text(),
            output.exit_code()
        ));
        Ok(())
    }

    async fn next_prompt(&mut self) -> Result<NextPrompt, ChannelError> {
        self.journal.borrow_mut().push("next_prompt".to_owned());
        Ok(self.script.pop_front().unwrap_or(NextPrompt::Closed))
    }
}

fn session(codes: Vec<Result<i32, TurnError>>, journal: &Journal) -> ScriptedSession {
    ScriptedSession {
        id: "session-7".into(),
        codes: codes.into(),
        journal: journal.clone(),
    }
}

#[test]
fn agent_session_contract_non_zero_is_ok_spawn_failure_is_err() {
    let journal = Journal::default();
    let mut s = session(
        vec![
            Ok(2),
            Err(TurnError::Spawn {
                program: "nope".into(),
                reason: "not found".into(),
                exit_code: 127,
            }),
        ],
        &journal,
    );
    assert_eq!(s.session_id(), "session-7");
    let out = block_on(s.run_turn("p")).expect("a non-zero turn is Ok");
    assert_eq!(out.exit_code(), Some(2));
    assert_eq!(out.text(), "answer:p");
    let err = block_on(s.run_turn("q")).expect_err("spawn failure is a TurnError");
    assert!(
        err.to_string().contains("cannot start the agent `nope`"),
        "{err}"
    );
}

#[test]
fn loop_is_strictly_listen_run_publish_and_waits_on_idle() {
    let journal = Journal::default();
    let mut s = session(vec![Ok(0), Ok(5)], &journal);
    let mut c = ScriptedChannel {
        script: VecDeque::from([
            NextPrompt::Ready("one".into()),
            NextPrompt::Idle,
            NextPrompt::Ready("two".into()),
            NextPrompt::Closed,
            NextPrompt::Ready("never".into()),
        ]),
        journal: journal.clone(),
    };
    let idle_journal = journal.clone();
    let turns = block_on(run_session_loop(&mut s, &mut c, || {
        idle_journal.borrow_mut().push("idle wait".to_owned());
        async {}
    }))
    .expect("loop");
    assert_eq!(turns, 2);
    assert_eq!(
        *journal.borrow(),
        [
            "next_prompt",
            "run_turn one",
            "publish_output answer:one Some(0)",
            "next_prompt",
            "idle wait",
            "next_prompt",
            "run_turn two",
            "publish_output answer:two Some(5)",
            "next_prompt",
        ]
    );
}

#[test]
fn a_turn_error_stops_the_loop_before_publishing() {
    let journal = Journal::default();
    let mut s = session(vec![Err(TurnError::Interrupted)], &journal);
    let mut c = ScriptedChannel {
        script: VecDeque::from([
            NextPrompt::Ready("one".into()),
            NextPrompt::Ready("two".into()),
        ]),
        journal: journal.clone(),
    };
    let err = block_on(run_session_loop(&mut s, &mut c, || async {})).expect_err("error");
    assert_eq!(err, LoopError::Turn(TurnError::Interrupted));
    assert_eq!(*journal.borrow(), ["next_prompt", "run_turn one"]);
}

#[test]
fn default_publish_output_ignores_the_output() {
    struct Quiet(VecDeque<NextPrompt>);
    impl Channel for Quiet {
        fn id(&self) -> &str {
            "quiet"
        }
        async fn next_prompt(&mut self) -> Result<NextPrompt, ChannelError> {
            Ok(self.0.pop_front().unwrap_or(NextPrompt::Closed))
        }
    }
    let journal = Journal::default();
    let mut s = session(vec![], &journal);
    let mut c = Quiet(VecDeque::from([NextPrompt::Ready("x".into())]));
    assert_eq!(c.id(), "quiet");
    let turns = block_on(run_session_loop(&mut s, &mut c, || async {})).expect("loop");
    assert_eq!(turns, 1);
    assert_eq!(*journal.borrow(), ["run_turn x"]);
}

#[test]
fn the_loop_hands_the_channels_harness_session_to_each_turn() {
    /// Names harness session `h-N` for its N-th prompt (none for the first) and records the
    /// session each turn's output reported.
    struct Owner {
        prompts: u32,
        reported: Vec<Option<String>>,
    }
    impl Channel for Owner {
        fn id(&self) -> &str {
            "owner"
        }
        async fn publish_output(&mut self, output: &TurnOutput) -> Result<(), ChannelError> {
            self.reported
                .push(output.harness_session_id().map(str::to_owned));
            Ok(())
        }
        async fn next_prompt(&mut self) -> Result<NextPrompt, ChannelError> {
            self.prompts += 1;
            Ok(if self.prompts <= 3 {
                NextPrompt::Ready(format!("p{}", self.prompts))
            } else {
                NextPrompt::Closed
            })
        }
        fn harness_session_id(&self) -> Option<&str> {
            ["", "h-2", "h-3"][self.prompts as usize - 1..]
                .first()
                .filter(|id| !id.is_empty())
                .copied()
        }
    }
    /// Resumes what it is told, and nothing it kept.
    struct Follower {
        next: Option<String>,
    }
    impl AgentSession for Follower {
        async fn run_turn(&mut self, _prompt: &str) -> Result<TurnOutput, TurnError> {
            let out = TurnOutput::from_text("a");
            Ok(match self.next.take() {
                Some(id) => out.with_harness_session_id(id),
                None => out,
            })
        }
        fn session_id(&self) -> &str {
            "follower"
        }
        fn continue_harness_session(&mut self, id: Option<&str>) {
            self.next = id.map(str::to_owned);
        }
    }
    let mut c = Owner {
        prompts: 0,
        reported: Vec::new(),
    };
    let mut s = Follower {
        next: Some("stale".into()),
    };
    let turns = block_on(run_session_loop(&mut s, &mut c, || async {})).expect("loop");
    assert_eq!(turns, 3);
    // The first turn is told "no session" even though the session held a stale one.
    assert_eq!(c.reported, [None, Some("h-2".into()), Some("h-3".into())]);
}

#[test]
fn turn_and_channel_errors_keep_their_sources() {
    use std::error::Error;
    use std::io;

    use agentrun_core::auto_mode::AutoModeError;
    use agentrun_core::turn::SharedError;

    let disk = SharedError::new(io::Error::other("disk full"));
    let turn = TurnError::Capture(disk.clone());
    assert_eq!(turn.to_string(), "the agent's output could not be captured");
    assert_eq!(
        turn.source().map(ToString::to_string).as_deref(),
        Some("disk full")
    );
    // Equal to its clone (the same error), not to another error with the same text.
    assert_eq!(turn.clone(), turn);
    assert_ne!(
        turn,
        TurnError::Capture(SharedError::new(io::Error::other("disk full")))
    );

    let state = ChannelError::State(disk);
    assert_eq!(
        state.source().map(ToString::to_string).as_deref(),
        Some("disk full")
    );
    let refused = ChannelError::from(AutoModeError::TooFewTurns(2));
    let source = refused.source().expect("the machine's error");
    assert!(source.to_string().contains("the turn limit 2"), "{source}");
    assert!(!source.to_string().contains("--max-turns"), "{source}");
}
