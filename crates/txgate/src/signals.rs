//! The signals txgate answers: SIGTERM and SIGINT stop it (drained);
//! SIGHUP reloads the API keys, the TLS certificate and the config file's
//! switches without a restart.

/// The SIGHUP stream, its handler installed now.
pub(crate) fn hangups() -> Option<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{SignalKind, signal};
    signal(SignalKind::hangup())
        .inspect_err(|_| {
            tracing::error!(
                "cannot install the SIGHUP handler; API keys and switches are not reloaded"
            );
        })
        .ok()
}

/// What SIGHUP switches without a restart: `conditional.enabled`, read
/// again from the config file. Applied only when the file's value changed
/// since it was last read: a SIGHUP sent for another reason (API keys)
/// does not undo a switch made on the admin listener.
pub(crate) struct Switches {
    /// The command line the process started with: its file, read again,
    /// and its environment and flags over it, as at the start.
    pub(crate) cli: crate::cli::Cli,
    pub(crate) conditions: std::sync::Arc<txgate_proxy::rpc::conditional::Conditions>,
    /// The file's `conditional.enabled` when last read.
    pub(crate) file_enabled: std::sync::atomic::AtomicBool,
}

impl Switches {
    /// Reads the config file again (with the environment and flags over
    /// it, as at the start: a setting given only there still counts) and
    /// applies its switches; a file that does not load or validate changes
    /// nothing.
    fn reload(&self) {
        let Some(path) = &self.cli.config else {
            return;
        };
        let loaded = self.cli.load();
        match loaded {
            Ok(config) => {
                let on = config.conditional.enabled;
                let was_in_file = self
                    .file_enabled
                    .swap(on, std::sync::atomic::Ordering::Relaxed);
                if was_in_file == on {
                    return;
                }
                if self.conditions.set_enabled(on) != on {
                    tracing::warn!(
                        enabled = on,
                        "eth_sendRawTransactionConditional switched by SIGHUP"
                    );
                }
            }
            Err(e) => tracing::error!(
                path = %path.display(),
                error = %e,
                "config not read again on SIGHUP; the switches in force stay"
            ),
        }
    }
}

/// On every SIGHUP: the API keys (when per-client limits are on) and the
/// switches of the config file.
pub(crate) async fn reload_on_sighup(
    hup: Option<tokio::signal::unix::Signal>,
    reloader: Option<txgate_proxy::KeyReloader>,
    tls: Option<txgate_proxy::server::tls::Tls>,
    switches: Switches,
) {
    let Some(mut hup) = hup else {
        return;
    };
    while hup.recv().await.is_some() {
        if let Some(reloader) = &reloader {
            reloader.reload();
        }
        if let Some(tls) = &tls {
            // Logged and counted by the reload itself.
            let tls = tls.clone();
            let _ = tokio::task::spawn_blocking(move || tls.reload()).await;
        }
        switches.reload();
    }
}

/// Completes on SIGTERM or SIGINT. The handlers are installed when this is
/// called, not when the future is first polled.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let signals = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = signals else {
            tracing::error!("cannot install signal handlers; shutdown only by kill");
            std::future::pending::<()>().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    }
}
