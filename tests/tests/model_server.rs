//! The scripted model servers, spoken to over raw HTTP/1.1: what each reply looks like on the
//! wire for each API, recording, keep-alive and bounds. The real CLIs against these servers
//! are tested in `real_claude.rs` and beside `agentrun agent` in the CLI package.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use agentrun_tests::model_server::{Api, ModelServer, Reply, TokenUsage, replies};
use serde_json::{Value, json};

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Whether a chunked body ended with its terminating chunk.
    complete: bool,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
    /// The `data:` payloads of an SSE body, with their `event:` names.
    fn events(&self) -> Vec<(Option<String>, String)> {
        let text = String::from_utf8(self.body.clone()).unwrap();
        text.split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                let mut name = None;
                let mut data = String::new();
                for line in e.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = Some(n.to_owned());
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data = d.to_owned();
                    }
                }
                (name, data)
            })
            .collect()
    }
}

fn send(stream: &mut TcpStream, path: &str, body: &str, close: bool) {
    let conn = if close { "connection: close\r\n" } else { "" };
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{conn}\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
}

fn receive(reader: &mut BufReader<TcpStream>) -> Response {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status: u16 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').unwrap();
        headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let mut body = Vec::new();
    let mut complete = true;
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v == "chunked");
    if chunked {
        complete = false;
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            let size = usize::from_str_radix(line.trim(), 16).unwrap();
            if size == 0 {
                line.clear();
                reader.read_line(&mut line).unwrap();
                complete = true;
                break;
            }
            let start = body.len();
            body.resize(start + size + 2, 0);
            reader.read_exact(&mut body[start..]).unwrap();
            body.truncate(start + size);
        }
    } else {
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map(|(_, v)| v.parse().unwrap())
            .unwrap();
        body.resize(len, 0);
        reader.read_exact(&mut body).unwrap();
    }
    Response {
        status,
        headers,
        body,
        complete,
    }
}

fn post(addr: SocketAddr, path: &str, body: Value) -> Response {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    send(&mut stream, path, &body.to_string(), true);
    receive(&mut BufReader::new(stream))
}

fn anthropic_request(stream: bool) -> Value {
    json!({"model": "claude-test-1", "stream": stream, "max_tokens": 100,
           "messages": [{"role": "user", "content": [{"type": "text", "text": "-x"}]}]})
}

#[test]
fn anthropic_streams_text_and_tool_calls_in_the_messages_sse_format() {
    let server = ModelServer::start(
        Api::AnthropicMessages,
        replies([
            Reply::text("hello").with_usage(TokenUsage {
                input: 7,
                cached: 3,
                output: 2,
                reasoning: 0,
            }),
            Reply::tool_call("Bash", json!({"command": "echo hi"})),
        ]),
    )
    .unwrap();
    let r = post(
        server.addr(),
        "/v1/messages?beta=true",
        anthropic_request(true),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert!(r.complete);
    let events = r.events();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_deref().unwrap()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let start: Value = serde_json::from_str(&events[0].1).unwrap();
    assert_eq!(start["message"]["model"], "claude-test-1");
    assert_eq!(start["message"]["usage"]["input_tokens"], 7);
    assert_eq!(start["message"]["usage"]["cache_read_input_tokens"], 3);
    let delta: Value = serde_json::from_str(&events[2].1).unwrap();
    assert_eq!(delta["delta"]["text"], "hello");
    let end: Value = serde_json::from_str(&events[4].1).unwrap();
    assert_eq!(end["delta"]["stop_reason"], "end_turn");
    assert_eq!(end["usage"]["output_tokens"], 2);

    let r = post(server.addr(), "/v1/messages", anthropic_request(true));
    let events = r.events();
    let block: Value = serde_json::from_str(&events[1].1).unwrap();
    assert_eq!(block["content_block"]["type"], "tool_use");
    assert_eq!(block["content_block"]["name"], "Bash");
    assert_eq!(block["content_block"]["id"], "toolu_0100");
    let args: Value = serde_json::from_str(&events[2].1).unwrap();
    let input: Value =
        serde_json::from_str(args["delta"]["partial_json"].as_str().unwrap()).unwrap();
    assert_eq!(input, json!({"command": "echo hi"}));
    let end: Value = serde_json::from_str(&events[4].1).unwrap();
    assert_eq!(end["delta"]["stop_reason"], "tool_use");
}

#[test]
fn anthropic_answers_whole_messages_and_counts_tokens_without_the_script() {
    let server =
        ModelServer::start(Api::AnthropicMessages, replies([Reply::text("whole")])).unwrap();
    let r = post(
        server.addr(),
        "/v1/messages/count_tokens",
        anthropic_request(false),
    );
    assert_eq!(r.status, 200);
    assert!(r.json()["input_tokens"].as_u64().unwrap() > 0);
    let r = post(server.addr(), "/v1/messages", anthropic_request(false));
    assert_eq!(r.status, 200);
    let message = r.json();
    assert_eq!(message["content"][0]["text"], "whole");
    assert_eq!(message["stop_reason"], "end_turn");
    // Only the second was a model request.
    assert_eq!(server.requests().len(), 2);
    assert_eq!(server.model_requests().len(), 1);
    assert_eq!(server.model_requests()[0].model_index, Some(0));
}

#[test]
fn api_errors_carry_the_real_apis_bodies_and_retry_headers() {
    let server = ModelServer::start(
        Api::AnthropicMessages,
        replies([
            Reply::rate_limited(),
            Reply::server_error(),
            Reply::prompt_too_long(250_000, 200_000),
        ]),
    )
    .unwrap();
    let r = post(server.addr(), "/v1/messages", anthropic_request(true));
    assert_eq!(r.status, 429);
    assert_eq!(r.header("x-should-retry"), Some("false"));
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    assert_eq!(r.json()["type"], "error");
    let r = post(server.addr(), "/v1/messages", anthropic_request(true));
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["error"]["type"], "api_error");
    let r = post(server.addr(), "/v1/messages", anthropic_request(true));
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    assert_eq!(
        r.json()["error"]["message"],
        "prompt is too long: 250000 tokens > 200000 maximum"
    );
    // The script is exhausted: a 500 that names the request.
    let r = post(server.addr(), "/v1/messages", anthropic_request(true));
    assert_eq!(r.status, 500);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no reply for model request 3"),
        "{:?}",
        r.json()
    );

    let openai =
        ModelServer::start(Api::OpenAiChat, replies([Reply::prompt_too_long(9, 8)])).unwrap();
    let r = post(
        openai.addr(),
        "/v1/chat/completions",
        json!({"stream": true}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");
}

#[test]
fn an_error_can_carry_a_given_retry_after_header_or_none() {
    let server = ModelServer::start(
        Api::OpenAiChat,
        replies([
            Reply::error_retry_after(429, "rate_limit_error", "slow down", Some("7")),
            Reply::error_retry_after(503, "overloaded_error", "busy", None),
        ]),
    )
    .unwrap();
    let r = post(server.addr(), "/v1/chat/completions", json!({}));
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("7"));
    assert_eq!(r.header("retry-after-ms"), None);
    assert_eq!(r.header("x-should-retry"), None);
    assert_eq!(r.json()["error"]["message"], "slow down");
    let r = post(server.addr(), "/v1/chat/completions", json!({}));
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), None);
    assert_eq!(r.header("retry-after-ms"), None);
    assert_eq!(r.json()["error"]["type"], "overloaded_error");
}

#[test]
fn a_status_reply_sends_the_apis_error_type_and_retry_after_only_when_given() {
    let server = ModelServer::start(
        Api::AnthropicMessages,
        replies([
            Reply::status(429, Some(3)),
            Reply::status(429, None),
            Reply::status(529, None),
            Reply::status(503, None),
            Reply::status(401, None),
        ]),
    )
    .unwrap();
    let r = post(server.addr(), "/v1/messages", anthropic_request(true));
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("3"));
    assert_eq!(r.header("x-should-retry"), None);
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    for (status, kind) in [
        (429, "rate_limit_error"),
        (529, "overloaded_error"),
        (503, "api_error"),
        (401, "authentication_error"),
    ] {
        let r = post(server.addr(), "/v1/messages", anthropic_request(true));
        assert_eq!(r.status, status);
        assert_eq!(r.header("retry-after"), None, "{status}");
        assert_eq!(r.header("x-should-retry"), None, "{status}");
        assert_eq!(r.json()["error"]["type"], kind, "{status}");
    }
}

#[test]
fn mid_stream_failures_error_inside_the_stream_or_cut_the_connection() {
    let server = ModelServer::start(
        Api::AnthropicMessages,
        replies([Reply::stream_error(), Reply::disconnect("partial")]),
    )
    .unwrap();
    let r = post(server.addr(), "/v1/messages", anthropic_request(true));
    assert_eq!(r.status, 200);
    let events = r.events();
    assert_eq!(events.last().unwrap().0.as_deref(), Some("error"));
    let error: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(error["error"]["type"], "overloaded_error");

    let r = post(server.addr(), "/v1/messages", anthropic_request(true));
    assert_eq!(r.status, 200);
    assert!(!r.complete, "the body must end without its last chunk");
    assert!(String::from_utf8_lossy(&r.body).contains("partial"));
    assert!(!String::from_utf8_lossy(&r.body).contains("message_stop"));
}

#[test]
fn requests_are_recorded_with_tool_results_and_user_texts_per_api() {
    let server = ModelServer::start(Api::AnthropicMessages, replies([Reply::text("a")])).unwrap();
    let body = json!({"model": "m", "stream": true, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "help"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "out"}],
                                      "is_error": true}]}]});
    post(server.addr(), "/v1/messages", body);
    let request = &server.requests()[0];
    assert_eq!(request.model(), Some("m"));
    assert!(request.wants_stream());
    assert_eq!(request.header("Content-Type"), Some("application/json"));
    assert!(request.has_user_text("help"));
    let results = request.tool_results();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].call_id, "toolu_1");
    assert_eq!(results[0].output, "out");
    assert!(results[0].is_error);

    let responses = ModelServer::start(Api::OpenAiResponses, replies([Reply::text("b")])).unwrap();
    post(
        responses.addr(),
        "/v1/responses",
        json!({"model": "gpt-test", "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "resume"}]},
            {"type": "function_call_output", "call_id": "call_1", "output": "done"}]}),
    );
    let request = &responses.requests()[0];
    assert!(request.wants_stream());
    assert!(request.has_user_text("resume"));
    assert_eq!(request.tool_results()[0].call_id, "call_1");
    assert_eq!(request.tool_results()[0].output, "done");

    let chat = ModelServer::start(Api::OpenAiChat, replies([Reply::text("c")])).unwrap();
    post(
        chat.addr(),
        "/v1/chat/completions",
        json!({"model": "m", "messages": [
            {"role": "user", "content": "--help me"},
            {"role": "tool", "tool_call_id": "call_2", "content": "ok"}]}),
    );
    let request = &chat.requests()[0];
    assert!(request.has_user_text("--help me"));
    assert_eq!(request.tool_results()[0].output, "ok");
}

#[test]
fn openai_responses_stream_function_calls_and_usage() {
    let server = ModelServer::start(
        Api::OpenAiResponses,
        replies([
            Reply::tool_call("shell", json!({"command": ["ls"]})).with_usage(TokenUsage {
                input: 10,
                cached: 5,
                output: 4,
                reasoning: 3,
            }),
        ]),
    )
    .unwrap();
    let r = post(server.addr(), "/v1/responses", json!({"model": "gpt-test"}));
    assert_eq!(r.status, 200);
    let events = r.events();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_deref().unwrap()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let done: Value = serde_json::from_str(&events[3].1).unwrap();
    assert_eq!(done["item"]["type"], "function_call");
    assert_eq!(done["item"]["name"], "shell");
    assert_eq!(done["item"]["call_id"], "call_0000");
    assert_eq!(done["item"]["arguments"], r#"{"command":["ls"]}"#);
    let completed: Value = serde_json::from_str(&events[4].1).unwrap();
    let usage = &completed["response"]["usage"];
    // OpenAI counts cached tokens inside the input.
    assert_eq!(usage["input_tokens"], 15);
    assert_eq!(usage["input_tokens_details"]["cached_tokens"], 5);
    assert_eq!(usage["output_tokens_details"]["reasoning_tokens"], 3);
}

#[test]
fn openai_chat_streams_chunks_then_done() {
    let server = ModelServer::start(
        Api::OpenAiChat,
        replies([Reply::tool_calls([
            ("bash", json!({"command": "true"})),
            ("write", json!({"filePath": "a", "content": "b"})),
        ])]),
    )
    .unwrap();
    let r = post(
        server.addr(),
        "/v1/chat/completions",
        json!({"model": "m", "stream": true}),
    );
    let events = r.events();
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let calls: Vec<Value> = events
        .iter()
        .filter_map(|(_, d)| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["tool_calls"][0]
                .as_object()
                .cloned()
        })
        .map(Value::Object)
        .collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1]["index"], 1);
    assert_eq!(calls[1]["function"]["name"], "write");
    let finish = events
        .iter()
        .filter_map(|(_, d)| serde_json::from_str::<Value>(d).ok())
        .find_map(|v| v["choices"][0]["finish_reason"].as_str().map(str::to_owned));
    assert_eq!(finish.as_deref(), Some("tool_calls"));
}

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let server = ModelServer::start(
        Api::AnthropicMessages,
        replies([Reply::text("one"), Reply::text("two")]),
    )
    .unwrap();
    let stream = TcpStream::connect(server.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    for expected in ["one", "two"] {
        send(
            &mut writer,
            "/v1/messages",
            &anthropic_request(false).to_string(),
            false,
        );
        let r = receive(&mut reader);
        assert_eq!(r.json()["content"][0]["text"], expected);
    }
    // A chunked request body is read too.
    let body = anthropic_request(false).to_string();
    write!(
        writer,
        "POST /v1/messages/count_tokens HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n\
         {:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    )
    .unwrap();
    assert_eq!(receive(&mut reader).status, 200);
    assert_eq!(server.requests()[2].json, anthropic_request(false));
}

#[test]
fn an_oversized_head_closes_the_connection_and_the_server_goes_on() {
    let server = ModelServer::start(Api::AnthropicMessages, replies([Reply::text("ok")])).unwrap();
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    let huge = "a".repeat(70 << 10);
    let _ = write!(
        stream,
        "POST /v1/messages HTTP/1.1\r\nx-big: {huge}\r\n\r\n"
    );
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "no response to an oversized head");
    assert!(server.requests().is_empty());
    let r = post(server.addr(), "/v1/messages", anthropic_request(false));
    assert_eq!(r.json()["content"][0]["text"], "ok");
}

#[test]
fn a_hanging_reply_holds_until_the_server_is_dropped_and_waiting_sees_the_request() {
    let server = ModelServer::start(Api::AnthropicMessages, replies([Reply::Hang])).unwrap();
    let addr = server.addr();
    let client = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        send(
            &mut stream,
            "/v1/messages",
            &anthropic_request(true).to_string(),
            true,
        );
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        rest
    });
    assert!(server.wait_for_requests(1, Duration::from_secs(60)));
    drop(server);
    assert!(client.join().unwrap().is_empty());
}
