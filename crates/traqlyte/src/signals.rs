//! SIGINT (Ctrl-C) and SIGTERM for the commands that stop on them: `serve`, `consume`,
//! `demo` (drain, then exit) and `backfill` (stop at the next line, print the counts).

/// SIGINT and SIGTERM, listened for from the moment this is made: a signal after it is
/// seen by [`Stop::next`], however late that is called (a signal before anything
/// listens is the default action's silent death, and one between two listeners was
/// lost).
pub(crate) struct Stop {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Stop {
    /// Listens from now on; must be called within the runtime.
    pub(crate) fn listen() -> std::io::Result<Stop> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Stop {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Stop {})
    }

    /// The next signal, as the status a shell reports a process it ended with: 130 for
    /// SIGINT, 143 for SIGTERM.
    pub(crate) async fn next(&mut self) -> u8 {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => 130,
                _ = self.terminate.recv() => 143,
            }
        }
        #[cfg(not(unix))]
        {
            match tokio::signal::ctrl_c().await {
                Ok(()) => 130,
                Err(_) => std::future::pending().await,
            }
        }
    }
}

/// Resolves on the first SIGINT or SIGTERM, listened for from its first poll: until a
/// command awaits it (`serve` once it listens, `demo` once its run is done), a signal
/// ends the process as by default, where one listened for but not yet heeded would be
/// ignored. A second signal exits at once with the first one's status, not waiting for
/// the drain (a service manager's stop timeout, an operator's second Ctrl-C):
/// everything acknowledged is already durable; requests not answered are retried by
/// their clients, messages not acked are redelivered.
pub(crate) async fn shutdown() {
    let mut stop = match Stop::listen() {
        Ok(stop) => stop,
        Err(err) => {
            tracing::warn!(%err, "no signal handler: SIGINT and SIGTERM end the process without a drain");
            return std::future::pending().await;
        }
    };
    let status = stop.next().await;
    tracing::info!("shutting down; a second signal exits at once");
    tokio::spawn(async move {
        stop.next().await;
        tracing::warn!("second signal: exiting without waiting for requests in flight");
        std::process::exit(i32::from(status));
    });
}
