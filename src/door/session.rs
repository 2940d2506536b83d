//! One execution's use of the door: armed by the sandbox before the
//! execution with its handler, caps and deadline; disarmed after it, giving
//! back what was used. Between executions (and while an interpreter starts)
//! nothing is armed, and the door answers that no host is bound.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::frames::{self, Frame, MAX_REQUEST_BYTES};
use super::{DoorHandler, FailureKind, RequestLog, ToolFailure};
use crate::sandbox::{DoorUsage, ToolCallRecord};

/// Requests (and tool calls) listed in an execution's usage; more are only
/// counted.
const LISTED_REQUESTS: usize = 100;
/// What the usage says of a call the execution's end cut short.
const CUT: &str = "cut";
/// The longest tool name a usage lists (the guest chose the name).
const MAX_TOOL_NAME_CHARS: usize = 128;
/// How long past the execution's own deadline a call may run: the
/// execution's timeout stops the guest first, so a slow call ends as a
/// timeout of the execution, not as an error the guest could swallow.
const DEADLINE_SLACK: Duration = Duration::from_secs(2);

/// Per-execution caps on the door.
#[derive(Clone, Copy, Debug)]
pub struct DoorCaps {
    /// Most frames one execution may send.
    pub max_calls: u32,
    /// Most time the host may spend on one execution's calls, together.
    pub max_time: Duration,
}

impl Default for DoorCaps {
    fn default() -> Self {
        Self {
            max_calls: 1000,
            max_time: Duration::from_secs(300),
        }
    }
}

/// An execution's door: armed or not.
#[derive(Default)]
pub struct DoorSlot(Mutex<Option<Armed>>);

struct Armed {
    handler: Arc<dyn DoorHandler>,
    caps: DoorCaps,
    deadline: Instant,
    used: Duration,
    usage: DoorUsage,
    log: RequestLog,
    /// The call being answered, and since when.
    in_flight: Option<(String, Instant)>,
}

impl DoorSlot {
    /// Arms the door for one execution that may run until `timeout` from now.
    pub fn arm(&self, handler: Arc<dyn DoorHandler>, caps: DoorCaps, timeout: Duration) {
        *self.lock() = Some(Armed {
            handler,
            caps,
            deadline: Instant::now() + timeout,
            used: Duration::ZERO,
            usage: DoorUsage::default(),
            log: RequestLog::default(),
            in_flight: None,
        });
    }

    /// Disarms the door; what the execution used, when it used the door.
    pub fn disarm(&self) -> Option<DoorUsage> {
        let mut armed = self.lock().take()?;
        if let Some((tool, started)) = armed.in_flight.take() {
            armed.note_call(&tool, started.elapsed(), Some(CUT));
        } else {
            armed.collect_log();
        }
        (armed.usage.frames > 0).then_some(armed.usage)
    }

    /// Whether the door is armed now.
    pub fn is_armed(&self) -> bool {
        self.lock().is_some()
    }

    /// Answers a frame of `len` bytes, read by `read` only once it is
    /// admitted (a frame over the caps is never copied). `None`: no
    /// execution is armed, so no host is bound.
    pub async fn answer(&self, len: usize, read: impl FnOnce() -> Vec<u8>) -> Option<Vec<u8>> {
        let (handler, bound, log, asked) = {
            let mut guard = self.lock();
            let armed = guard.as_mut()?;
            armed.usage.frames += 1;
            if let Some(failure) = armed.admit(len) {
                return Some(frames::error_answer(None, &failure));
            }
            let asked = match frames::parse(&read()) {
                Ok(frame) => frame,
                Err(refused) => {
                    return Some(frames::error_answer(refused.id, &refused.failure));
                }
            };
            let bound = match armed.bound() {
                Ok(bound) => bound,
                Err(failure) => return Some(frames::error_answer(asked.id(), &failure)),
            };
            if let Frame::Call { tool, .. } = &asked {
                armed.in_flight = Some((tool.clone(), Instant::now()));
            }
            (armed.handler.clone(), bound, armed.log.clone(), asked)
        };
        let (id, tool, args) = match asked {
            Frame::List { id } => {
                // Listing may start upstream servers: its time counts too.
                let started = Instant::now();
                let tools = tokio::time::timeout(bound, handler.tools(bound)).await;
                if let Some(armed) = self.lock().as_mut() {
                    armed.used += started.elapsed();
                }
                return Some(frames::list_answer(id, tools.unwrap_or_default()));
            }
            Frame::Call { id, tool, args } => (id, tool, args),
        };
        let started = Instant::now();
        let outcome = tokio::time::timeout(bound, handler.call(&tool, args, bound, &log)).await;
        let outcome = outcome.unwrap_or_else(|_| {
            Err(ToolFailure::new(
                FailureKind::Timeout,
                format!(
                    "{tool} did not answer within {:.1} s (the execution's door time)",
                    bound.as_secs_f64()
                ),
            ))
        });
        if let Some(armed) = self.lock().as_mut() {
            let failed = outcome.as_ref().err().map(|f| f.kind.as_str());
            armed.note_call(&tool, started.elapsed(), failed);
        }
        Some(match outcome {
            Ok(value) => frames::value_answer(id, value.value, value.raw),
            Err(failure) => frames::error_answer(id, &failure),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Armed>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Armed {
    /// Refuses a frame past the call cap or over the size cap.
    fn admit(&self, len: usize) -> Option<ToolFailure> {
        if self.usage.frames > self.caps.max_calls {
            return Some(ToolFailure::new(
                FailureKind::BudgetExceeded,
                format!(
                    "this execution allows {} door frames (SANDBOX_DOOR_MAX_CALLS); this was frame {}",
                    self.caps.max_calls, self.usage.frames
                ),
            ));
        }
        (len > MAX_REQUEST_BYTES).then(|| {
            ToolFailure::new(
                FailureKind::TooLarge,
                format!("the frame is {len} bytes; at most {MAX_REQUEST_BYTES} (1 MiB)"),
            )
        })
    }

    /// How long the next call may take: what is left of the door's time,
    /// and of the execution's (with a little slack, so that the execution's
    /// own timeout is what stops it).
    fn bound(&self) -> Result<Duration, ToolFailure> {
        let left = self.caps.max_time.saturating_sub(self.used);
        if left.is_zero() {
            return Err(ToolFailure::new(
                FailureKind::BudgetExceeded,
                format!(
                    "this execution has used its {:.0} s of door time (SANDBOX_DOOR_MAX_SECONDS)",
                    self.caps.max_time.as_secs_f64()
                ),
            ));
        }
        let until_deadline =
            (self.deadline + DEADLINE_SLACK).saturating_duration_since(Instant::now());
        Ok(left.min(until_deadline))
    }

    /// Counts a call that took `spent` (and failed as `failed` says), lists
    /// it while the list has room, and collects the requests it made.
    fn note_call(&mut self, tool: &str, spent: Duration, failed: Option<&str>) {
        self.in_flight = None;
        self.used += spent;
        self.usage.calls += 1;
        let ms = spent.as_secs_f64() * 1000.0;
        self.usage.host_ms += ms;
        if self.usage.tool_calls.len() < LISTED_REQUESTS {
            self.usage.tool_calls.push(ToolCallRecord {
                tool: tool.chars().take(MAX_TOOL_NAME_CHARS).collect(),
                ms,
                failed: failed.map(str::to_owned),
            });
        } else {
            self.usage.tool_calls_not_listed += 1;
        }
        self.collect_log();
    }

    /// Moves the requests noted so far into the usage, the first ones listed.
    fn collect_log(&mut self) {
        for record in self.log.take() {
            if self.usage.requests.len() < LISTED_REQUESTS {
                self.usage.requests.push(record);
            } else {
                self.usage.requests_not_listed += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::door::ToolValue;
    use async_trait::async_trait;
    use serde_json::{Map, Value, json};

    /// Echoes its arguments; `sleep` sleeps that many milliseconds first.
    struct Echo;

    #[async_trait]
    impl DoorHandler for Echo {
        fn offers(&self, tool: &str) -> bool {
            tool == "echo"
        }

        async fn tools(&self, _bound: Duration) -> Vec<Value> {
            vec![json!({"name": "echo", "description": "echo", "inputSchema": {"type": "object"}})]
        }

        async fn call(
            &self,
            tool: &str,
            args: Map<String, Value>,
            _bound: Duration,
            _log: &RequestLog,
        ) -> Result<ToolValue, ToolFailure> {
            if tool != "echo" {
                return Err(ToolFailure::new(FailureKind::UnknownTool, tool));
            }
            if let Some(ms) = args.get("sleep").and_then(Value::as_u64) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Ok(Value::Object(args).into())
        }
    }

    async fn ask(slot: &DoorSlot, frame: Value) -> Option<Value> {
        let bytes = serde_json::to_vec(&frame).unwrap();
        let answer = slot.answer(bytes.len(), || bytes.clone()).await?;
        Some(serde_json::from_slice(&answer).unwrap())
    }

    #[tokio::test]
    async fn an_unarmed_door_has_no_host_and_an_armed_one_answers_and_counts() {
        let slot = DoorSlot::default();
        let call = json!({"v": 1, "id": 1, "op": "call", "tool": "echo", "args": {"x": 2}});
        assert_eq!(ask(&slot, call.clone()).await, None);
        slot.arm(Arc::new(Echo), DoorCaps::default(), Duration::from_secs(30));
        assert_eq!(
            ask(&slot, call).await,
            Some(json!({"v": 1, "id": 1, "ok": true, "value": {"x": 2}}))
        );
        let listed = ask(&slot, json!({"v": 1, "id": 2, "op": "list"}))
            .await
            .unwrap();
        assert_eq!(listed["tools"][0]["name"], "echo");
        let usage = slot.disarm().unwrap();
        assert_eq!((usage.frames, usage.calls), (2, 1));
        assert!(!slot.is_armed());
    }

    #[tokio::test]
    async fn calls_past_the_cap_and_past_the_door_time_are_refused() {
        let slot = DoorSlot::default();
        let caps = DoorCaps {
            max_calls: 2,
            max_time: Duration::from_millis(50),
        };
        slot.arm(Arc::new(Echo), caps, Duration::from_secs(30));
        let slow =
            json!({"v": 1, "id": 1, "op": "call", "tool": "echo", "args": {"sleep": 10_000}});
        let answer = ask(&slot, slow).await.unwrap();
        assert_eq!(answer["error"]["kind"], "timeout", "{answer}");
        let again = json!({"v": 1, "id": 2, "op": "call", "tool": "echo", "args": {}});
        let answer = ask(&slot, again.clone()).await.unwrap();
        assert_eq!(answer["error"]["kind"], "budget_exceeded", "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("SANDBOX_DOOR_MAX_SECONDS")
        );
        let answer = ask(&slot, again).await.unwrap();
        assert_eq!(answer["error"]["kind"], "budget_exceeded", "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("SANDBOX_DOOR_MAX_CALLS")
        );
    }

    #[tokio::test]
    async fn an_oversized_frame_is_refused_without_being_read() {
        let slot = DoorSlot::default();
        slot.arm(Arc::new(Echo), DoorCaps::default(), Duration::from_secs(30));
        let answer = slot
            .answer(MAX_REQUEST_BYTES + 1, || panic!("never read"))
            .await
            .unwrap();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(answer["error"]["kind"], "too_large");
    }
}
