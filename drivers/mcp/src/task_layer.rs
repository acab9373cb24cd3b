//! Tasks on the wire (MCP protocol revision 2025-11-25): a transport layer between rmcp's
//! service and the connection, the same for stdio and for each HTTP session.
//!
//! rmcp speaks a later task model (no `tasks/result`, no `tasks/list`, other field names)
//! and its typed `tools/call` params drop `task`. So the layer serves the 2025-11-25 methods
//! itself, on the messages as they pass:
//!
//! - a `tools/call` of `run`, `agent`, `compact` or `fanout` that carries `params.task` (the
//!   transport found it in the raw message and put it in the request's extensions as a
//!   [`TaskParam`]) is answered at once with a `CreateTaskResult`; the call itself goes on to
//!   rmcp under an id of its own, with a [`TaskStop`] it stops on, and its answer is kept in
//!   the session's [`TaskTable`] instead of being sent;
//! - `tasks/get`, `tasks/result` (answered when the call is), `tasks/list` and `tasks/cancel`
//!   are answered here, from the table; an unknown task id or cursor is `-32602`;
//! - the answers of `initialize` and `tools/list` get the `tasks` capability and each task
//!   tool's `execution.taskSupport`;
//! - a task's progress notifications carry the client's progress token (or none reach it when
//!   it gave none) and the related-task `_meta`, and set the task's status message; each
//!   status change is told with `notifications/tasks/status`.
//!
//! The layer's worker owns the connection's transport and reads the client and rmcp's
//! messages in turn; rmcp's side of the layer is a pair of channels, so that no answer is
//! written from a future rmcp may drop. Messages to the client are written each on a task of
//! its own, as rmcp writes them, so that a slow stream holds up nothing else.

use std::collections::HashMap;
use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

use rmcp::RoleServer;
use rmcp::model::{
    ClientNotification, ClientRequest, CustomNotification, CustomResult, ErrorCode, ErrorData,
    GetExtensions, GetMeta, JsonRpcMessage, JsonRpcRequest, NumberOrString, ProgressToken,
    RequestId, ServerNotification, ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};

use crate::render;
use crate::tasks::{CancelError, CreateError, Limits, Outcome, TaskTable, TaskView};

/// The tools that may run as tasks (`execution.taskSupport: "optional"`); `read` answers at
/// once and never does.
pub(crate) const TASK_TOOLS: [&str; 4] = ["run", "agent", "compact", "fanout"];

/// The `_meta` key that ties a message to its task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// How long the last messages to the client may take to be written when the session ends.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The prefix of the ids the calls of tasks have towards rmcp.
const INTERNAL_ID_PREFIX: &str = "agentrun-task-call-";

/// `params.task` of a `tools/call`, as the client sent it: rmcp's typed params have no such
/// field, so the transport that parsed the raw message keeps it in the request's extensions.
#[derive(Debug, Clone)]
pub(crate) struct TaskParam(pub(crate) Value);

/// Set to `true` when `tasks/cancel` stops a call run as a task (the tools stop on it as on
/// a cancelled request, and still answer, so the stopped run's record is the task's result).
#[derive(Debug, Clone)]
pub(crate) struct TaskStop(pub(crate) watch::Receiver<bool>);

/// The `task` member of the params of a raw `tools/call` message, if it has one.
pub(crate) fn task_param(message: &[u8]) -> Option<TaskParam> {
    #[derive(serde::Deserialize)]
    struct Message {
        #[serde(default)]
        method: Option<String>,
        #[serde(default)]
        params: Option<Params>,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(default)]
        task: Option<Value>,
    }
    let message: Message = serde_json::from_slice(message).ok()?;
    if message.method.as_deref() != Some("tools/call") {
        return None;
    }
    message.params?.task.map(TaskParam)
}

/// The [`TaskParam`] of a request: in its extensions (stdio), or in those of the HTTP
/// request it came in (Streamable HTTP, where rmcp keeps the request's parts).
fn task_param_of(request: &ClientRequest) -> Option<Value> {
    let extensions = request.extensions();
    if let Some(param) = extensions.get::<TaskParam>() {
        return Some(param.0.clone());
    }
    extensions
        .get::<hyper::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<TaskParam>())
        .map(|param| param.0.clone())
}

/// The requested retention of a `task` param: `{}` or `{"ttl": MILLISECONDS}`.
fn requested_ttl(param: &Value) -> Result<Option<u64>, ErrorData> {
    let Some(object) = param.as_object() else {
        return Err(ErrorData::invalid_params(
            "invalid params for `tools/call`: `task` must be an object, e.g. {\"ttl\": 600000}",
            None,
        ));
    };
    match object.get("ttl") {
        None | Some(Value::Null) => Ok(None),
        Some(ttl) => ttl.as_u64().map(Some).ok_or_else(|| {
            ErrorData::invalid_params(
                format!(
                    "invalid params for `tools/call`: `task.ttl` must be a whole number of \
                     milliseconds, not {}",
                    render::clip(&ttl.to_string(), 80)
                ),
                None,
            )
        }),
    }
}

/// A request the layer answers itself.
enum TaskRequest {
    Get(String),
    Result(String),
    List(Option<String>),
    Cancel(String),
}

/// The task request a custom request is (`tasks/result`, `tasks/list`, and `tasks/get` or
/// `tasks/cancel` when rmcp could not read their params), or why its params are invalid.
fn custom_task_request(
    method: &str,
    params: Option<&Value>,
) -> Option<Result<TaskRequest, ErrorData>> {
    let string = |name: &str| -> Result<Option<String>, ErrorData> {
        match params.and_then(|p| p.get(name)) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(ErrorData::invalid_params(
                format!(
                    "invalid params for `{method}`: `{name}` must be a string, not {}",
                    render::clip(&other.to_string(), 80)
                ),
                None,
            )),
        }
    };
    let task_id = || {
        string("taskId")?.ok_or_else(|| {
            ErrorData::invalid_params(
                format!("invalid params for `{method}`: `taskId` (a string) is required"),
                None,
            )
        })
    };
    Some(match method {
        "tasks/get" => task_id().map(TaskRequest::Get),
        "tasks/result" => task_id().map(TaskRequest::Result),
        "tasks/cancel" => task_id().map(TaskRequest::Cancel),
        "tasks/list" => string("cursor").map(TaskRequest::List),
        _ => return None,
    })
}

fn unknown_task(id: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "no task {} in this session: unknown, or dropped after its ttl",
            render::clip(&serde_json::to_string(id).unwrap_or_default(), 200)
        ),
        None,
    )
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The `tasks` capability of `initialize`'s answer.
fn with_tasks_capability(result: &ServerResult) -> ServerResult {
    let mut value = serde_json::to_value(result).unwrap_or_default();
    value["capabilities"]["tasks"] = json!({
        "list": {},
        "cancel": {},
        "requests": {"tools": {"call": {}}},
    });
    ServerResult::CustomResult(CustomResult(value))
}

/// `execution.taskSupport: "optional"` on each task tool of a `tools/list` answer.
fn with_task_support(result: &ServerResult) -> ServerResult {
    let mut value = serde_json::to_value(result).unwrap_or_default();
    if let Some(tools) = value["tools"].as_array_mut() {
        for tool in tools {
            if tool["name"]
                .as_str()
                .is_some_and(|name| TASK_TOOLS.contains(&name))
            {
                tool["execution"] = json!({"taskSupport": "optional"});
            }
        }
    }
    ServerResult::CustomResult(CustomResult(value))
}

/// A transport that serves tasks in front of `T` (see the module documentation).
pub(crate) struct TaskLayer {
    to_worker: mpsc::Sender<TxJsonRpcMessage<RoleServer>>,
    from_worker: mpsc::Receiver<RxJsonRpcMessage<RoleServer>>,
    close: Option<oneshot::Sender<()>>,
    worker: Option<tokio::task::JoinHandle<()>>,
}

impl TaskLayer {
    /// Puts the layer in front of `inner`; its worker runs on the current tokio runtime.
    pub(crate) fn new<T>(inner: T) -> Self
    where
        T: Transport<RoleServer> + 'static,
    {
        let (to_worker, from_rmcp) = mpsc::channel(16);
        let (to_rmcp, from_worker) = mpsc::channel(16);
        let (close, closed) = oneshot::channel();
        let worker = Worker {
            inner,
            to_rmcp: Some(to_rmcp),
            table: TaskTable::new(Limits::default()),
            calls: HashMap::new(),
            by_token: HashMap::new(),
            next_call: 0,
            sends: tokio::task::JoinSet::new(),
        };
        Self {
            to_worker,
            from_worker,
            close: Some(close),
            worker: Some(tokio::spawn(worker.run(from_rmcp, closed))),
        }
    }
}

impl Transport<RoleServer> for TaskLayer {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let to_worker = self.to_worker.clone();
        async move {
            to_worker.send(item).await.map_err(|_| {
                io::Error::new(io::ErrorKind::NotConnected, "the connection is closed")
            })
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        self.from_worker.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        if let Some(close) = self.close.take() {
            let _ = close.send(());
        }
        if let Some(worker) = self.worker.take() {
            worker.await.map_err(io::Error::other)?;
        }
        Ok(())
    }
}

/// A call running as a task.
struct Call {
    task: String,
    /// The progress token the call reports under: the client's, or one of ours.
    token: ProgressToken,
    /// Whether the client asked for progress (else its notifications only update the task).
    client_token: bool,
    stop: watch::Sender<bool>,
}

struct Worker<T> {
    inner: T,
    /// `None` once the client's input ended (rmcp was told so).
    to_rmcp: Option<mpsc::Sender<RxJsonRpcMessage<RoleServer>>>,
    table: TaskTable<RequestId>,
    /// The calls of working (or cancelled, not yet answered) tasks, by their id towards rmcp.
    calls: HashMap<RequestId, Call>,
    by_token: HashMap<ProgressToken, RequestId>,
    next_call: u64,
    /// Messages being written to the client, each on a task of its own as rmcp sends them:
    /// a slow stream (an HTTP client that does not read one) holds up no other message, and
    /// the worker goes on reading the client meanwhile.
    sends: tokio::task::JoinSet<()>,
}

enum Event {
    FromClient(Option<RxJsonRpcMessage<RoleServer>>),
    FromRmcp(Option<TxJsonRpcMessage<RoleServer>>),
    Close,
    Expire,
}

impl<T: Transport<RoleServer>> Worker<T> {
    async fn run(
        mut self,
        mut from_rmcp: mpsc::Receiver<TxJsonRpcMessage<RoleServer>>,
        mut closed: oneshot::Receiver<()>,
    ) {
        loop {
            let expiry = self.table.next_expiry().map(|at| {
                tokio::time::Instant::now()
                    + std::time::Duration::from_millis(at.saturating_sub(now_ms()))
            });
            let listening = self.to_rmcp.is_some();
            let event = tokio::select! {
                message = self.inner.receive(), if listening => Event::FromClient(message),
                message = from_rmcp.recv() => Event::FromRmcp(message),
                _ = &mut closed => Event::Close,
                () = tokio::time::sleep_until(expiry.unwrap_or_else(tokio::time::Instant::now)),
                    if expiry.is_some() => Event::Expire,
            };
            match event {
                Event::FromClient(Some(message)) => self.incoming(message).await,
                // The client is gone: rmcp learns it, and what it still sends goes out.
                Event::FromClient(None) => self.to_rmcp = None,
                Event::FromRmcp(Some(message)) => self.outgoing(message),
                Event::FromRmcp(None) => break,
                Event::Close => {
                    while let Ok(message) = from_rmcp.try_recv() {
                        self.outgoing(message);
                    }
                    break;
                }
                Event::Expire => {
                    self.table.expire(now_ms());
                }
            }
        }
        // The last answers go out before the connection closes (as long as rmcp waits for
        // its own: a client that stopped reading does not hold up the end).
        let drain = async { while self.sends.join_next().await.is_some() {} };
        if tokio::time::timeout(CLOSE_WAIT, drain).await.is_err() {
            tracing::warn!("messages to the client were still being written when it closed");
        }
        if let Err(e) = self.inner.close().await {
            tracing::debug!("closing the connection failed: {e}");
        }
    }

    /// Writes a message to the client. A client that went away cannot be told; its end of
    /// input ends the session.
    fn send(&mut self, message: TxJsonRpcMessage<RoleServer>) {
        while self.sends.try_join_next().is_some() {}
        let sent = self.inner.send(message);
        self.sends.spawn(async move {
            if let Err(e) = sent.await {
                tracing::debug!("a message to the client was not sent: {e}");
            }
        });
    }

    fn reply(&mut self, id: RequestId, result: Value) {
        self.send(JsonRpcMessage::response(
            ServerResult::CustomResult(CustomResult(result)),
            id,
        ));
    }

    fn reply_error(&mut self, id: RequestId, error: ErrorData) {
        self.send(JsonRpcMessage::error(error, Some(id)));
    }

    /// `tasks/result`'s answer: what the call answered, tied to its task.
    fn reply_outcome(&mut self, id: RequestId, task: &str, outcome: Outcome) {
        match outcome {
            Outcome::Result(mut result) => {
                if !result["_meta"].is_object() {
                    result["_meta"] = json!({});
                }
                result["_meta"][RELATED_TASK] = json!({"taskId": task});
                self.reply(id, result);
            }
            Outcome::Error(error) => self.reply_error(id, error),
        }
    }

    fn notify_status(&mut self, view: &TaskView) {
        let notification =
            CustomNotification::new("notifications/tasks/status", Some(view.to_json()));
        self.send(JsonRpcMessage::notification(
            ServerNotification::CustomNotification(notification),
        ));
    }

    async fn forward(&mut self, message: RxJsonRpcMessage<RoleServer>) {
        if let Some(to_rmcp) = &self.to_rmcp
            && to_rmcp.send(message).await.is_err()
        {
            self.to_rmcp = None;
        }
    }

    /// A message from the client.
    async fn incoming(&mut self, message: RxJsonRpcMessage<RoleServer>) {
        let request = match message {
            JsonRpcMessage::Request(request) => request,
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    // A cancelled `tasks/result` waits no more (rmcp never saw it). The calls
                    // of tasks are stopped with tasks/cancel; a cancellation naming one (only
                    // a client guessing our ids could send it) would lose its answer.
                    if self.table.forget_waiter(id) || self.calls.contains_key(id) {
                        return;
                    }
                }
                return self
                    .forward(JsonRpcMessage::Notification(notification))
                    .await;
            }
            other => return self.forward(other).await,
        };
        let id = request.id.clone();
        if self.calls.contains_key(&id) {
            let error = ErrorData::invalid_request(
                "duplicate request id: this server uses it for a call running as a task; give \
                 every request an id of its own",
                None,
            );
            return self.reply_error(id, error);
        }
        if matches!(request.request, ClientRequest::CallToolRequest(_))
            && let Some(param) = task_param_of(&request.request)
        {
            return self.start_task(request, &param).await;
        }
        let task_request = match &request.request {
            ClientRequest::GetTaskRequest(get) => {
                Some(Ok(TaskRequest::Get(get.params.task_id.clone())))
            }
            ClientRequest::CancelTaskRequest(cancel) => {
                Some(Ok(TaskRequest::Cancel(cancel.params.task_id.clone())))
            }
            ClientRequest::CustomRequest(custom) => {
                custom_task_request(&custom.method, custom.params.as_ref())
            }
            _ => None,
        };
        match task_request {
            None => self.forward(JsonRpcMessage::Request(request)).await,
            Some(Err(error)) => self.reply_error(id, error),
            Some(Ok(task_request)) => self.serve(id, task_request),
        }
    }

    /// A task-augmented `tools/call`: the task is created and told at once, then the call
    /// goes to rmcp under an id of its own.
    async fn start_task(&mut self, mut request: JsonRpcRequest<ClientRequest>, param: &Value) {
        let id = request.id.clone();
        let ClientRequest::CallToolRequest(call) = &request.request else {
            return;
        };
        let ttl = match requested_ttl(param) {
            Ok(ttl) => ttl,
            Err(error) => return self.reply_error(id, error),
        };
        let name = call.params.name.to_string();
        if !TASK_TOOLS.contains(&name.as_str()) {
            if name == "read" {
                let error = ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    "tool `read` does not run as a task (its execution.taskSupport is \
                     forbidden): call it without `task`",
                    None,
                );
                return self.reply_error(id, error);
            }
            // An unknown tool: the call gets the usual error for it.
            return self.forward(JsonRpcMessage::Request(request)).await;
        }
        let task = uuid::Uuid::new_v4().to_string();
        let view = match self.table.create(task.clone(), ttl, now_ms()) {
            Ok(view) => view,
            Err(CreateError::Full(max)) => {
                let error = ErrorData::invalid_request(
                    format!(
                        "this session already has {max} tasks, none of them finished: wait \
                         for one, or cancel one with tasks/cancel"
                    ),
                    None,
                );
                return self.reply_error(id, error);
            }
            Err(CreateError::Duplicate) => {
                let error = ErrorData::internal_error("a task id was drawn twice", None);
                return self.reply_error(id, error);
            }
        };
        let (token, client_token) = match request.request.get_meta().get_progress_token() {
            Some(token) => (token, true),
            None => {
                // Progress still sets the task's status message.
                let token = ProgressToken(NumberOrString::String(task.as_str().into()));
                request
                    .request
                    .get_meta_mut()
                    .set_progress_token(token.clone());
                (token, false)
            }
        };
        let (stop, stopped) = watch::channel(false);
        request.request.extensions_mut().insert(TaskStop(stopped));
        self.next_call += 1;
        let internal =
            NumberOrString::String(format!("{INTERNAL_ID_PREFIX}{}", self.next_call).into());
        self.by_token.insert(token.clone(), internal.clone());
        self.calls.insert(
            internal.clone(),
            Call {
                task,
                token,
                client_token,
                stop,
            },
        );
        self.reply(id, json!({"task": view.to_json()}));
        request.id = internal;
        self.forward(JsonRpcMessage::Request(request)).await;
    }

    /// Answers `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel`.
    fn serve(&mut self, id: RequestId, request: TaskRequest) {
        let now = now_ms();
        match request {
            TaskRequest::Get(task) => match self.table.get(&task, now) {
                Some(view) => self.reply(id, view.to_json()),
                None => self.reply_error(id, unknown_task(&task)),
            },
            TaskRequest::Result(task) => match self.table.result(&task, id.clone(), now) {
                Ok(Some(outcome)) => self.reply_outcome(id, &task, outcome),
                // Answered when the call is.
                Ok(None) => {}
                Err(_) => self.reply_error(id, unknown_task(&task)),
            },
            TaskRequest::List(cursor) => match self.table.list(cursor.as_deref(), now) {
                Ok(page) => {
                    let tasks: Vec<Value> = page.tasks.iter().map(TaskView::to_json).collect();
                    let mut result = json!({"tasks": tasks});
                    if let Some(next) = page.next_cursor {
                        result["nextCursor"] = json!(next);
                    }
                    self.reply(id, result);
                }
                Err(_) => {
                    let error = ErrorData::invalid_params(
                        format!(
                            "invalid params for `tasks/list`: cursor {} is not one this session \
                             handed out; start without a cursor",
                            render::clip(&serde_json::to_string(&cursor).unwrap_or_default(), 200)
                        ),
                        None,
                    );
                    self.reply_error(id, error);
                }
            },
            TaskRequest::Cancel(task) => match self.table.cancel(&task, now) {
                Ok(view) => {
                    // The call stops its process group and answers; that answer is the
                    // task's result.
                    if let Some(call) = self.calls.values().find(|c| c.task == task) {
                        call.stop.send_replace(true);
                    }
                    self.reply(id, view.to_json());
                    self.notify_status(&view);
                }
                Err(CancelError::Unknown) => self.reply_error(id, unknown_task(&task)),
                Err(CancelError::Terminal(status)) => {
                    let error = ErrorData::invalid_params(
                        format!(
                            "cannot cancel task {task}: it is already {}",
                            status.as_str()
                        ),
                        None,
                    );
                    self.reply_error(id, error);
                }
            },
        }
    }

    /// A message from rmcp to the client.
    fn outgoing(&mut self, mut message: TxJsonRpcMessage<RoleServer>) {
        match &mut message {
            JsonRpcMessage::Response(response) if self.calls.contains_key(&response.id) => {
                let result = serde_json::to_value(&response.result).unwrap_or_default();
                let internal = response.id.clone();
                return self.answered(&internal, Outcome::Result(result));
            }
            JsonRpcMessage::Error(error)
                if error
                    .id
                    .as_ref()
                    .is_some_and(|id| self.calls.contains_key(id)) =>
            {
                let internal = error.id.clone().unwrap_or(RequestId::Number(0));
                let outcome = Outcome::Error(error.error.clone());
                return self.answered(&internal, outcome);
            }
            JsonRpcMessage::Response(response) => match &response.result {
                ServerResult::InitializeResult(_) => {
                    response.result = with_tasks_capability(&response.result);
                }
                ServerResult::ListToolsResult(_) => {
                    response.result = with_task_support(&response.result);
                }
                _ => {}
            },
            JsonRpcMessage::Notification(notification) => {
                if let ServerNotification::ProgressNotification(progress) =
                    &mut notification.notification
                    && let Some(internal) = self.by_token.get(&progress.params.progress_token)
                    && let Some(call) = self.calls.get(internal)
                {
                    if let Some(text) = &progress.params.message {
                        self.table.progress(&call.task, text, now_ms());
                    }
                    if !call.client_token {
                        return;
                    }
                    let meta = progress.params.meta.get_or_insert_default();
                    meta.0
                        .0
                        .insert(RELATED_TASK.to_owned(), json!({"taskId": call.task}));
                }
            }
            JsonRpcMessage::Request(_) | JsonRpcMessage::Error(_) => {}
        }
        self.send(message);
    }

    /// The call of a task answered: the answer is kept, the `tasks/result` requests waiting
    /// for it get it, and the client is told of the new status.
    fn answered(&mut self, internal: &RequestId, outcome: Outcome) {
        let Some(call) = self.calls.remove(internal) else {
            return;
        };
        self.by_token.remove(&call.token);
        let Some(answered) = self.table.answer(&call.task, outcome, now_ms()) else {
            return;
        };
        for waiter in answered.waiters {
            self.reply_outcome(waiter, &call.task, answered.outcome.clone());
        }
        if answered.status_changed {
            self.notify_status(&answered.view);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The layer as a client sees it: raw JSON-RPC lines through [`crate::McpServer::serve`]
    //! on an in-memory pipe, with `sh` allowed.

    use std::collections::VecDeque;

    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf};

    use crate::McpServer;

    struct Client {
        write: tokio::io::WriteHalf<DuplexStream>,
        read: tokio::io::Lines<BufReader<ReadHalf<DuplexStream>>>,
        /// Messages read while waiting for another.
        seen: VecDeque<Value>,
        next_id: i64,
        dir: tempfile::TempDir,
    }

    impl Client {
        async fn start() -> Client {
            let store = tempfile::tempdir().unwrap();
            let server =
                McpServer::builder(agentrun_fs::Store::open(store.path().join("store")).unwrap())
                    .allow("sh")
                    .build()
                    .unwrap();
            let (client, server_end) = tokio::io::duplex(1 << 20);
            let (read, write) = tokio::io::split(server_end);
            tokio::spawn(server.serve(read, write, std::future::pending()));
            let (read, write) = tokio::io::split(client);
            let mut client = Client {
                write,
                read: BufReader::new(read).lines(),
                seen: VecDeque::new(),
                next_id: 0,
                dir: store,
            };
            let init = client
                .request(
                    "initialize",
                    json!({"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "test", "version": "1"}}),
                )
                .await;
            assert_eq!(
                init["result"]["capabilities"]["tasks"],
                json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
                "{init}"
            );
            client
                .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .await;
            client
        }

        async fn send(&mut self, message: Value) {
            let mut line = serde_json::to_vec(&message).unwrap();
            line.push(b'\n');
            self.write.write_all(&line).await.unwrap();
        }

        async fn next(&mut self) -> Value {
            let line =
                tokio::time::timeout(std::time::Duration::from_secs(120), self.read.next_line())
                    .await
                    .expect("an answer within 2 minutes")
                    .unwrap()
                    .expect("the server still writes");
            serde_json::from_str(&line).unwrap()
        }

        /// Sends a request and returns its answer; what comes before it is kept in `seen`.
        async fn request(&mut self, method: &str, params: Value) -> Value {
            self.next_id += 1;
            let id = self.next_id;
            self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
                .await;
            self.answer(id).await
        }

        async fn answer(&mut self, id: i64) -> Value {
            if let Some(at) = self.seen.iter().position(|m| m["id"] == id) {
                return self.seen.remove(at).unwrap();
            }
            loop {
                let message = self.next().await;
                if message["id"] == id && message.get("method").is_none() {
                    return message;
                }
                self.seen.push_back(message);
            }
        }

        /// The first message (seen already, or read now) for which `until` holds.
        async fn wait_notification(&mut self, until: impl Fn(&Value) -> bool) -> Value {
            if let Some(at) = self.seen.iter().position(&until) {
                return self.seen.remove(at).unwrap();
            }
            loop {
                let message = self.next().await;
                if until(&message) {
                    return message;
                }
                self.seen.push_back(message);
            }
        }

        async fn run_task(&mut self, script: &str, meta: Value) -> String {
            let created = self
                .request(
                    "tools/call",
                    json!({"name": "run", "arguments": {"command": ["sh", "-c", script]},
                           "task": {"ttl": 120000}, "_meta": meta}),
                )
                .await;
            let task = &created["result"]["task"];
            assert_eq!(task["status"], "working", "{created}");
            assert_eq!(task["ttl"], 120000);
            assert_eq!(task["pollInterval"], 1000);
            assert!(task["createdAt"].as_str().unwrap().ends_with('Z'));
            task["taskId"].as_str().unwrap().to_owned()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_as_a_task_is_polled_to_its_result() {
        let mut c = Client::start().await;
        let tools = c.request("tools/list", json!({})).await;
        for tool in tools["result"]["tools"].as_array().unwrap() {
            let support = &tool["execution"]["taskSupport"];
            match tool["name"].as_str().unwrap() {
                "read" => assert!(tool.get("execution").is_none(), "{tool}"),
                _ => assert_eq!(support, "optional", "{tool}"),
            }
        }
        // The run waits for the test to let it finish.
        let go = c.dir.path().join("go");
        let script = format!(
            "while [ ! -e '{}' ]; do sleep 0.05; done; echo done-output",
            go.display()
        );
        let task = c.run_task(&script, json!({"progressToken": "p1"})).await;
        // Progress keeps flowing under the client's token, tied to the task.
        let progress = c
            .wait_notification(|m| m["method"] == "notifications/progress")
            .await;
        let working = c.request("tasks/get", json!({"taskId": task})).await;
        assert_eq!(working["result"]["status"], "working", "{working}");
        std::fs::write(&go, "").unwrap();
        assert_eq!(progress["params"]["progressToken"], "p1", "{progress}");
        assert_eq!(
            progress["params"]["_meta"][super::RELATED_TASK]["taskId"],
            task.as_str()
        );
        let status = loop {
            let got = c.request("tasks/get", json!({"taskId": task})).await;
            let status = got["result"]["status"].as_str().unwrap().to_owned();
            if status != "working" {
                break got;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        };
        assert_eq!(status["result"]["status"], "completed", "{status}");
        let told = c
            .wait_notification(|m| m["method"] == "notifications/tasks/status")
            .await;
        assert_eq!(told["params"]["taskId"], task.as_str());
        assert_eq!(told["params"]["status"], "completed");
        let result = c.request("tasks/result", json!({"taskId": task})).await;
        let text = result["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("done-output"), "{result}");
        assert_eq!(
            result["result"]["_meta"][super::RELATED_TASK]["taskId"],
            task.as_str()
        );
        let listed = c.request("tasks/list", json!({})).await;
        assert_eq!(listed["result"]["tasks"][0]["taskId"], task.as_str());
        assert!(listed["result"].get("nextCursor").is_none());
        // A plain call still answers directly.
        let direct = c
            .request(
                "tools/call",
                json!({"name": "run", "arguments": {"command": ["sh", "-c", "echo direct"]}}),
            )
            .await;
        assert!(
            direct["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("direct")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn result_blocks_until_the_call_answers_and_cancel_stops_it() {
        let mut c = Client::start().await;
        let started = c.dir.path().join("started");
        let script = format!("echo started; : > '{}'; sleep 600", started.display());
        let slow = c.run_task(&script, json!({})).await;
        while !started.exists() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        // tasks/result waits; the answer comes once tasks/cancel stopped the run. (One that
        // did not wait would be on its way before the answer to the next request.)
        c.send(
            json!({"jsonrpc": "2.0", "id": 1000, "method": "tasks/result",
                      "params": {"taskId": slow}}),
        )
        .await;
        // A tasks/result the client cancels waits no more, and is never answered.
        c.send(
            json!({"jsonrpc": "2.0", "id": 2000, "method": "tasks/result",
                      "params": {"taskId": slow}}),
        )
        .await;
        c.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": 2000}}),
        )
        .await;
        let working = c.request("tasks/get", json!({"taskId": slow})).await;
        assert_eq!(working["result"]["status"], "working");
        assert!(
            c.seen.iter().all(|m| m["id"] != 1000),
            "tasks/result did not wait"
        );
        let cancelled = c.request("tasks/cancel", json!({"taskId": slow})).await;
        assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
        let result = c.answer(1000).await;
        let text = result["result"]["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("started"),
            "the stopped run's output: {result}"
        );
        let again = c.request("tasks/cancel", json!({"taskId": slow})).await;
        assert_eq!(again["error"]["code"], -32602, "{again}");
        let got = c.request("tasks/get", json!({"taskId": slow})).await;
        assert_eq!(got["result"]["status"], "cancelled", "it stays cancelled");
        let stray: Vec<_> = c
            .seen
            .iter()
            .filter(|m| m.get("method").is_none())
            .collect();
        assert!(stray.is_empty(), "answers nobody waits for: {stray:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_task_requests_get_protocol_errors() {
        let mut c = Client::start().await;
        for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
            let answer = c.request(method, json!({"taskId": "no-such-task"})).await;
            assert_eq!(answer["error"]["code"], -32602, "{method}: {answer}");
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("no-such-task")
            );
            let answer = c.request(method, json!({})).await;
            assert_eq!(
                answer["error"]["code"], -32602,
                "{method} without taskId: {answer}"
            );
        }
        let answer = c.request("tasks/list", json!({"cursor": "bogus"})).await;
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        let answer = c.request("tasks/list", json!({})).await;
        assert_eq!(answer["result"]["tasks"], json!([]));
        let read = c
            .request(
                "tools/call",
                json!({"name": "read", "arguments": {"filePath": "artifact://x"}, "task": {}}),
            )
            .await;
        assert_eq!(read["error"]["code"], -32601, "{read}");
        let ttl = c
            .request(
                "tools/call",
                json!({"name": "run", "arguments": {"command": ["sh"]}, "task": {"ttl": "soon"}}),
            )
            .await;
        assert_eq!(ttl["error"]["code"], -32602, "{ttl}");
        // An error result fails its task, with the reason as its status message.
        let created = c
            .request(
                "tools/call",
                json!({"name": "run", "arguments": {"command": ["ls"]}, "task": {}}),
            )
            .await;
        let task = created["result"]["task"]["taskId"]
            .as_str()
            .unwrap()
            .to_owned();
        let result = c.request("tasks/result", json!({"taskId": task})).await;
        assert_eq!(result["result"]["isError"], true, "{result}");
        let got = c.request("tasks/get", json!({"taskId": task})).await;
        assert_eq!(got["result"]["status"], "failed", "{got}");
        assert!(
            got["result"]["statusMessage"]
                .as_str()
                .unwrap()
                .contains("not allowed")
        );
    }
}
