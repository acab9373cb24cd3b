//! Signals the CLI handles while it runs a child.
//!
//! The child runs in its own process group, so a terminal's Ctrl-C reaches only agentrun:
//! SIGINT, SIGTERM and SIGHUP stop the run the way a timeout does (the child's stop signals,
//! the grace period, SIGKILL; a second one during the grace period sends SIGKILL at once),
//! the output captured so far is kept as a cancelled run, and
//! agentrun exits with 128 + the signal number. SIGXFSZ is caught too, so a file-size limit
//! makes the capture write fail with EFBIG and be reported, instead of killing agentrun before
//! it can say anything. Handlers are reset to the default in the child by `exec`.

use async_signal::{Signal, Signals};
use smol::stream::StreamExt as _;

/// The installed handlers and the stop signal received, if any.
pub(crate) struct Interrupts {
    signals: Option<Signals>,
    received: Option<Signal>,
}

impl Interrupts {
    /// Installs the handlers. Best effort: without them the signals keep their default action,
    /// which ends agentrun as before.
    pub(crate) fn install() -> Self {
        let signals = Signals::new([Signal::Int, Signal::Term, Signal::Hup, Signal::Xfsz]);
        if let Err(e) = &signals {
            say!("agentrun: warning: cannot handle signals ({e}); Ctrl-C will not keep the output");
        }
        Self {
            signals: signals.ok(),
            received: None,
        }
    }

    /// Resolves when a stop signal arrives (never without handlers).
    pub(crate) async fn stopped(&mut self) {
        let Some(signals) = self.signals.as_mut() else {
            return std::future::pending().await;
        };
        while let Some(signal) = signals.next().await {
            match signal {
                Ok(Signal::Xfsz) | Err(_) => continue,
                Ok(signal) => {
                    self.received = Some(signal);
                    return;
                }
            }
        }
        std::future::pending().await
    }

    /// Every stop signal from now on, as a stream of stop requests: the first stops the run,
    /// a second one during the grace period kills the child's group at once.
    pub(crate) fn requests(&mut self) -> impl smol::stream::Stream<Item = ()> + Send + '_ {
        smol::stream::unfold(self, |this| async move {
            this.stopped().await;
            Some(((), this))
        })
    }

    /// The shell's exit code for the stop signal received: 128 + its number.
    pub(crate) fn exit_code(&self) -> Option<u8> {
        self.received.map(|signal| match signal {
            Signal::Hup => 129,
            Signal::Int => 130,
            _ => 143,
        })
    }
}
