//! Tasks (MCP protocol revision 2025-11-25): what one session knows of its task-augmented
//! calls. Each task has an unguessable id, a status (`working`, then `completed`, `failed` or
//! `cancelled`), the time it was created and last changed, a retention (`ttl`), and, once its
//! call answered, that answer. The table hands out pages of tasks (newest first, with an
//! opaque cursor), keeps the requests waiting in `tasks/result` for a task still working, and
//! forgets a finished task once its ttl has passed.
//!
//! No I/O: every instant is passed in, as milliseconds since the Unix epoch; ids are made by
//! the caller. The wire side (`task_layer`) turns requests into these calls and answers.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, UNIX_EPOCH};

use rmcp::model::ErrorData;
use serde_json::{Value, json};

use crate::render;

/// The suggested interval between two `tasks/get` of a working task: progress changes about
/// once a second.
pub(crate) const POLL_INTERVAL_MS: u64 = 1000;

/// The bounds of one session's tasks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Retention of a task whose request names no `ttl`.
    pub(crate) default_ttl_ms: u64,
    /// Longest retention a request may ask for; a longer one is cut to this.
    pub(crate) max_ttl_ms: u64,
    /// How long a finished task is kept at least, whatever its ttl: a call that outlived its
    /// ttl can still be fetched.
    pub(crate) keep_after_answer_ms: u64,
    /// Most tasks kept at once (working or finished).
    pub(crate) max_tasks: usize,
    /// Most tasks on one `tasks/list` page.
    pub(crate) page_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            default_ttl_ms: 3_600_000,
            max_ttl_ms: 86_400_000,
            keep_after_answer_ms: 60_000,
            max_tasks: 256,
            page_size: 50,
        }
    }
}

/// A task's status, as the protocol names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Working,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    fn is_terminal(self) -> bool {
        self != Status::Working
    }
}

/// What a task's call answered: its result (a `CallToolResult` as JSON), or a JSON-RPC error.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    Result(Value),
    Error(ErrorData),
}

impl Outcome {
    /// The status a call's answer gives its task, and a message saying why it failed: a
    /// protocol error, or a result with `isError` (its first line of text).
    fn status(&self) -> (Status, Option<String>) {
        match self {
            Outcome::Error(e) => (Status::Failed, Some(render::clip(&e.message, 500))),
            Outcome::Result(result) if result["isError"] == json!(true) => {
                let first = result["content"]
                    .as_array()
                    .and_then(|items| items.iter().find_map(|i| i["text"].as_str()))
                    .and_then(|text| text.lines().next())
                    .unwrap_or("the call answered with an error");
                (Status::Failed, Some(render::clip(first, 500)))
            }
            Outcome::Result(_) => (Status::Completed, None),
        }
    }
}

/// A task as `tasks/get`, `tasks/list`, `tasks/cancel` and `notifications/tasks/status` show
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskView {
    pub(crate) id: String,
    pub(crate) status: Status,
    pub(crate) message: Option<String>,
    pub(crate) created_ms: u64,
    pub(crate) updated_ms: u64,
    pub(crate) ttl_ms: u64,
}

impl TaskView {
    /// The protocol's `Task` object.
    pub(crate) fn to_json(&self) -> Value {
        let at = |ms: u64| agentrun_core::time::rfc3339(UNIX_EPOCH + Duration::from_millis(ms));
        let mut task = json!({
            "taskId": self.id,
            "status": self.status.as_str(),
            "createdAt": at(self.created_ms),
            "lastUpdatedAt": at(self.updated_ms),
            "ttl": self.ttl_ms,
            "pollInterval": POLL_INTERVAL_MS,
        });
        if let Some(message) = &self.message {
            task["statusMessage"] = json!(message);
        }
        task
    }
}

/// Why a task could not be created.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CreateError {
    /// Every kept task is still working.
    Full(usize),
    /// The id is taken (the caller makes random ids: never in practice).
    Duplicate,
}

/// Why a task could not be cancelled.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CancelError {
    Unknown,
    Terminal(Status),
}

/// A cursor that this table did not hand out.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadCursor;

/// One page of `tasks/list`.
#[derive(Debug)]
pub(crate) struct Page {
    pub(crate) tasks: Vec<TaskView>,
    pub(crate) next_cursor: Option<String>,
}

/// A call's answer, recorded: the task as it now is, whether its status changed (a cancelled
/// task stays cancelled), and the `tasks/result` requests that waited for it.
#[derive(Debug)]
pub(crate) struct Answered<W> {
    pub(crate) view: TaskView,
    pub(crate) status_changed: bool,
    pub(crate) outcome: Outcome,
    pub(crate) waiters: Vec<W>,
}

#[derive(Debug)]
struct Entry<W> {
    view: TaskView,
    /// When the call answered; from then on the task can be dropped.
    answered_ms: Option<u64>,
    outcome: Option<Outcome>,
    waiters: Vec<W>,
}

/// One session's tasks; `W` identifies a waiting `tasks/result` request.
#[derive(Debug)]
pub(crate) struct TaskTable<W> {
    limits: Limits,
    /// By creation sequence number.
    entries: BTreeMap<u64, Entry<W>>,
    by_id: HashMap<String, u64>,
    next_seq: u64,
}

const CURSOR_PREFIX: &str = "tasks-before-";

impl<W> TaskTable<W> {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            limits,
            entries: BTreeMap::new(),
            by_id: HashMap::new(),
            next_seq: 0,
        }
    }

    /// A new working task with id `id`, kept for `ttl_ms` (the default when `None`, at most
    /// the longest allowed). When the table is full the oldest finished task is dropped to
    /// make room; when none has finished, the task is refused.
    pub(crate) fn create(
        &mut self,
        id: String,
        ttl_ms: Option<u64>,
        now: u64,
    ) -> Result<TaskView, CreateError> {
        self.expire(now);
        if self.by_id.contains_key(&id) {
            return Err(CreateError::Duplicate);
        }
        if self.entries.len() >= self.limits.max_tasks {
            let oldest_finished = self
                .entries
                .iter()
                .find(|(_, e)| e.answered_ms.is_some())
                .map(|(seq, _)| *seq);
            match oldest_finished {
                Some(seq) => self.remove(seq),
                None => return Err(CreateError::Full(self.limits.max_tasks)),
            }
        }
        let ttl_ms = ttl_ms
            .unwrap_or(self.limits.default_ttl_ms)
            .min(self.limits.max_ttl_ms);
        let view = TaskView {
            id: id.clone(),
            status: Status::Working,
            message: Some("The call is running.".to_owned()),
            created_ms: now,
            updated_ms: now,
            ttl_ms,
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_id.insert(id, seq);
        self.entries.insert(
            seq,
            Entry {
                view: view.clone(),
                answered_ms: None,
                outcome: None,
                waiters: Vec::new(),
            },
        );
        Ok(view)
    }

    fn remove(&mut self, seq: u64) {
        if let Some(entry) = self.entries.remove(&seq) {
            self.by_id.remove(&entry.view.id);
        }
    }

    fn entry(&mut self, id: &str) -> Option<&mut Entry<W>> {
        let seq = self.by_id.get(id)?;
        self.entries.get_mut(seq)
    }

    /// The task `id`, if this session has it.
    pub(crate) fn get(&mut self, id: &str, now: u64) -> Option<TaskView> {
        self.expire(now);
        Some(self.entry(id)?.view.clone())
    }

    /// A page of tasks, newest first, from the start or from where `cursor` (handed out with
    /// the previous page) left off.
    pub(crate) fn list(&mut self, cursor: Option<&str>, now: u64) -> Result<Page, BadCursor> {
        self.expire(now);
        let before = match cursor {
            None => self.next_seq,
            Some(cursor) => {
                let seq = cursor
                    .strip_prefix(CURSOR_PREFIX)
                    .and_then(|n| n.parse::<u64>().ok())
                    .filter(|seq| cursor == format!("{CURSOR_PREFIX}{seq}"))
                    .ok_or(BadCursor)?;
                if seq > self.next_seq {
                    return Err(BadCursor);
                }
                seq
            }
        };
        let mut newer_first = self.entries.range(..before).rev();
        let tasks: Vec<(u64, TaskView)> = newer_first
            .by_ref()
            .take(self.limits.page_size)
            .map(|(seq, e)| (*seq, e.view.clone()))
            .collect();
        let next_cursor = match (newer_first.next(), tasks.last()) {
            (Some(_), Some((last, _))) => Some(format!("{CURSOR_PREFIX}{last}")),
            _ => None,
        };
        Ok(Page {
            tasks: tasks.into_iter().map(|(_, view)| view).collect(),
            next_cursor,
        })
    }

    /// Cancels a working task: it is `cancelled` from now on, whatever its call answers.
    pub(crate) fn cancel(&mut self, id: &str, now: u64) -> Result<TaskView, CancelError> {
        self.expire(now);
        let entry = self.entry(id).ok_or(CancelError::Unknown)?;
        if entry.view.status.is_terminal() {
            return Err(CancelError::Terminal(entry.view.status));
        }
        entry.view.status = Status::Cancelled;
        entry.view.message = Some(
            "Cancelled by tasks/cancel: the call's process group was told to stop.".to_owned(),
        );
        entry.view.updated_ms = now;
        Ok(entry.view.clone())
    }

    /// Notes a working task's latest progress message.
    pub(crate) fn progress(&mut self, id: &str, message: &str, now: u64) {
        if let Some(entry) = self.entry(id)
            && entry.view.status == Status::Working
        {
            entry.view.message = Some(render::clip(message, 1024));
            entry.view.updated_ms = now;
        }
    }

    /// Records what the task's call answered. A working task becomes `completed` or `failed`;
    /// a cancelled one stays cancelled (its answer is what the stopped call said). `None`
    /// when the task is gone or already has an answer.
    pub(crate) fn answer(&mut self, id: &str, outcome: Outcome, now: u64) -> Option<Answered<W>> {
        let entry = self.entry(id)?;
        if entry.outcome.is_some() {
            return None;
        }
        let status_changed = entry.view.status == Status::Working;
        if status_changed {
            let (status, message) = outcome.status();
            entry.view.status = status;
            entry.view.message = message;
            entry.view.updated_ms = now;
        }
        entry.answered_ms = Some(now);
        entry.outcome = Some(outcome.clone());
        Some(Answered {
            view: entry.view.clone(),
            status_changed,
            outcome,
            waiters: std::mem::take(&mut entry.waiters),
        })
    }

    /// `tasks/result`: the answer when the call has given it (`Ok(Some)`); otherwise
    /// `waiter` waits for it (`Ok(None)`) and is handed back by [`answer`](Self::answer).
    /// `Err` when the session has no such task.
    pub(crate) fn result(
        &mut self,
        id: &str,
        waiter: W,
        now: u64,
    ) -> Result<Option<Outcome>, CancelError> {
        self.expire(now);
        let entry = self.entry(id).ok_or(CancelError::Unknown)?;
        match &entry.outcome {
            Some(outcome) => Ok(Some(outcome.clone())),
            None => {
                entry.waiters.push(waiter);
                Ok(None)
            }
        }
    }

    /// Forgets a waiting `tasks/result` request (the client cancelled it); whether it was
    /// waiting.
    pub(crate) fn forget_waiter(&mut self, waiter: &W) -> bool
    where
        W: PartialEq,
    {
        for entry in self.entries.values_mut() {
            if let Some(at) = entry.waiters.iter().position(|w| w == waiter) {
                entry.waiters.remove(at);
                return true;
            }
        }
        false
    }

    /// When a finished task may go: its ttl has passed since it was created, and the
    /// shortest retention has passed since its call answered.
    fn expiry(&self, entry: &Entry<W>) -> Option<u64> {
        let answered = entry.answered_ms?;
        let by_ttl = entry.view.created_ms.saturating_add(entry.view.ttl_ms);
        Some(by_ttl.max(answered.saturating_add(self.limits.keep_after_answer_ms)))
    }

    /// Drops the finished tasks whose retention has passed; returns how many.
    pub(crate) fn expire(&mut self, now: u64) -> usize {
        let gone: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| self.expiry(e).is_some_and(|at| now >= at))
            .map(|(seq, _)| *seq)
            .collect();
        for seq in &gone {
            self.remove(*seq);
        }
        gone.len()
    }

    /// The next instant a task expires at, if any will.
    pub(crate) fn next_expiry(&self) -> Option<u64> {
        self.entries.values().filter_map(|e| self.expiry(e)).min()
    }

    /// The ids of the working tasks, oldest first.
    #[cfg(test)]
    fn working(&self) -> Vec<&str> {
        self.entries
            .values()
            .filter(|e| e.view.status == Status::Working)
            .map(|e| e.view.id.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1000;

    fn table() -> TaskTable<u32> {
        TaskTable::new(Limits {
            default_ttl_ms: 60 * S,
            max_ttl_ms: 600 * S,
            keep_after_answer_ms: 10 * S,
            max_tasks: 4,
            page_size: 2,
        })
    }

    fn done(text: &str) -> Outcome {
        Outcome::Result(json!({"content": [{"type": "text", "text": text}]}))
    }

    #[test]
    fn a_task_works_then_completes_and_is_shown_as_the_protocol_says() {
        let mut t = table();
        let created = t
            .create("a".into(), Some(30 * S), 1_764_066_600_000)
            .unwrap();
        assert_eq!(created.status, Status::Working);
        assert_eq!(created.ttl_ms, 30 * S);
        let wire = created.to_json();
        assert_eq!(wire["taskId"], "a");
        assert_eq!(wire["status"], "working");
        assert_eq!(wire["createdAt"], "2025-11-25T10:30:00Z");
        assert_eq!(wire["lastUpdatedAt"], "2025-11-25T10:30:00Z");
        assert_eq!(wire["ttl"], 30_000);
        assert_eq!(wire["pollInterval"], POLL_INTERVAL_MS);

        let now = 1_764_066_600_000 + 5 * S;
        t.progress("a", "running for 5s", now);
        let got = t.get("a", now).unwrap();
        assert_eq!(got.message.as_deref(), Some("running for 5s"));
        assert_eq!(got.to_json()["lastUpdatedAt"], "2025-11-25T10:30:05Z");

        let answered = t.answer("a", done("hello"), now + S).unwrap();
        assert!(answered.status_changed);
        assert_eq!(answered.view.status, Status::Completed);
        assert_eq!(answered.view.message, None);
        assert!(answered.waiters.is_empty());
        assert!(
            t.answer("a", done("again"), now + 2 * S).is_none(),
            "one answer per task"
        );
        assert!(matches!(
            t.result("a", 1, now + 2 * S),
            Ok(Some(Outcome::Result(r))) if r["content"][0]["text"] == "hello"
        ));
        assert_eq!(t.get("nope", now), None);
        assert_eq!(t.result("nope", 1, now).unwrap_err(), CancelError::Unknown);
    }

    #[test]
    fn errors_and_error_results_fail_the_task_with_their_message() {
        let mut t = table();
        t.create("e".into(), None, 0).unwrap();
        t.create("r".into(), None, 0).unwrap();
        let protocol = t
            .answer(
                "e",
                Outcome::Error(ErrorData::invalid_params("no such tool", None)),
                S,
            )
            .unwrap();
        assert_eq!(protocol.view.status, Status::Failed);
        assert_eq!(protocol.view.message.as_deref(), Some("no such tool"));
        let result = Outcome::Result(json!({
            "content": [{"type": "text", "text": "`ls` is not allowed\nmore"}],
            "isError": true
        }));
        let tool = t.answer("r", result, S).unwrap();
        assert_eq!(tool.view.status, Status::Failed);
        assert_eq!(tool.view.message.as_deref(), Some("`ls` is not allowed"));
    }

    #[test]
    fn result_waits_for_the_answer_and_is_handed_back_with_it() {
        let mut t = table();
        t.create("a".into(), None, 0).unwrap();
        assert!(matches!(t.result("a", 7, S), Ok(None)));
        assert!(matches!(t.result("a", 8, S), Ok(None)));
        assert!(matches!(t.result("a", 9, S), Ok(None)));
        assert!(t.forget_waiter(&8), "the client cancelled request 8");
        assert!(!t.forget_waiter(&8));
        let answered = t.answer("a", done("x"), 2 * S).unwrap();
        assert_eq!(answered.waiters, vec![7, 9]);
        assert!(matches!(t.result("a", 10, 3 * S), Ok(Some(_))));
        assert!(!t.forget_waiter(&10), "an answered request does not wait");
    }

    #[test]
    fn cancel_is_final_and_refused_on_a_finished_task() {
        let mut t = table();
        t.create("a".into(), None, 0).unwrap();
        t.create("b".into(), None, 0).unwrap();
        assert!(matches!(t.result("a", 1, S), Ok(None)));
        let cancelled = t.cancel("a", 2 * S).unwrap();
        assert_eq!(cancelled.status, Status::Cancelled);
        assert_eq!(cancelled.updated_ms, 2 * S);
        assert!(cancelled.message.unwrap().contains("tasks/cancel"));
        assert_eq!(
            t.cancel("a", 3 * S).unwrap_err(),
            CancelError::Terminal(Status::Cancelled)
        );
        // The stopped call still answers: the task stays cancelled, the waiter gets it.
        let answered = t.answer("a", done("[Cancelled]"), 3 * S).unwrap();
        assert!(!answered.status_changed);
        assert_eq!(answered.view.status, Status::Cancelled);
        assert_eq!(answered.waiters, vec![1]);
        t.answer("b", done("ok"), 3 * S).unwrap();
        assert_eq!(
            t.cancel("b", 4 * S).unwrap_err(),
            CancelError::Terminal(Status::Completed)
        );
        assert_eq!(t.cancel("zz", 4 * S).unwrap_err(), CancelError::Unknown);
    }

    #[test]
    fn finished_tasks_go_after_their_ttl_working_ones_never() {
        let mut t = table();
        t.create("short".into(), Some(5 * S), 0).unwrap();
        t.create("long".into(), Some(10_000 * S), 0).unwrap();
        t.create("slow".into(), Some(S), 0).unwrap();
        assert_eq!(t.get("long", 0).unwrap().ttl_ms, 600 * S, "cut to the max");
        assert_eq!(t.next_expiry(), None, "nothing finished yet");
        t.answer("short", done("s"), 2 * S).unwrap();
        // ttl ends at 5 s, but it is kept 10 s after its answer.
        assert_eq!(t.next_expiry(), Some(12 * S));
        assert!(t.get("short", 12 * S - 1).is_some());
        assert!(t.get("short", 12 * S).is_none());
        // A task that outlived its ttl is kept while it works.
        assert!(t.get("slow", 1000 * S).is_some());
        t.answer("slow", done("late"), 1000 * S).unwrap();
        assert!(t.get("slow", 1009 * S).is_some());
        assert_eq!(t.expire(1010 * S), 1);
        t.answer("long", done("l"), 1010 * S).unwrap();
        // Its ttl (600 s) passed long ago: kept the shortest retention after its answer.
        assert_eq!(t.next_expiry(), Some(1020 * S));
        assert!(t.get("long", 1019 * S).is_some());
        assert_eq!(t.expire(1020 * S), 1);
        assert!(t.working().is_empty());
    }

    #[test]
    fn a_full_table_makes_room_by_dropping_the_oldest_finished_task() {
        let mut t = table();
        for id in ["a", "b", "c", "d"] {
            t.create(id.into(), None, 0).unwrap();
        }
        assert_eq!(t.create("e".into(), None, S), Err(CreateError::Full(4)));
        t.answer("c", done("c"), S).unwrap();
        t.answer("b", done("b"), S).unwrap();
        t.create("e".into(), None, 2 * S).unwrap();
        assert!(t.get("b", 2 * S).is_none(), "the oldest finished one went");
        assert!(t.get("c", 2 * S).is_some());
        assert_eq!(t.working(), vec!["a", "d", "e"]);
        t.create("f".into(), None, 3 * S).unwrap();
        assert!(t.get("c", 3 * S).is_none());
        assert_eq!(t.create("g".into(), None, 3 * S), Err(CreateError::Full(4)));
        assert_eq!(
            t.create("a".into(), None, 3 * S),
            Err(CreateError::Duplicate)
        );
    }

    #[test]
    fn list_pages_newest_first_with_a_cursor() {
        let mut t = table();
        for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
            t.create(id.into(), None, i as u64).unwrap();
        }
        let first = t.list(None, 10).unwrap();
        let ids: Vec<_> = first.tasks.iter().map(|v| v.id.as_str()).collect();
        assert_eq!(ids, ["c", "b"]);
        let cursor = first.next_cursor.expect("a third task");
        // A task made meanwhile does not shift the pages already handed out.
        t.create("d".into(), None, 11).unwrap();
        let second = t.list(Some(&cursor), 12).unwrap();
        let ids: Vec<_> = second.tasks.iter().map(|v| v.id.as_str()).collect();
        assert_eq!(ids, ["a"]);
        assert_eq!(second.next_cursor, None);
        // Exactly a page: no cursor.
        let mut two = table();
        two.create("x".into(), None, 0).unwrap();
        two.create("y".into(), None, 0).unwrap();
        assert_eq!(two.list(None, 0).unwrap().next_cursor, None);
        for bogus in [
            "nonsense",
            "tasks-before-",
            "tasks-before-x",
            "tasks-before-01",
            "tasks-before-99",
            "tasks-before--1",
        ] {
            assert_eq!(t.list(Some(bogus), 12).unwrap_err(), BadCursor, "{bogus}");
        }
        assert!(table().list(None, 0).unwrap().tasks.is_empty());
    }
}
