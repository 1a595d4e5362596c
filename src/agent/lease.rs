//! The session lease of a running turn: taken before the turn, renewed by a heartbeat while it
//! runs, released when it ends, on every path (the end of the turn, or the drop of the lease
//! when a caller gives up early). The store keeps the lease (see [`crate::session`]); this side
//! only drives it from the async loop, with every SQLite call on a blocking thread.

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::limits::SESSION_LEASE_HEARTBEAT;
use crate::session::{LeaseOwner, SessionError, SessionStore};

/// This process's lease on one session, held while a turn runs there.
pub struct TurnLease {
    store: Arc<SessionStore>,
    session_id: String,
    heartbeat: JoinHandle<()>,
    /// Fires when a renewal found the lease gone: another process took it over after this
    /// one failed to renew it for [`crate::limits::SESSION_LEASE_EXPIRY`].
    lost: CancellationToken,
    released: bool,
}

impl TurnLease {
    /// Takes the session's lease for this process and starts its heartbeat. Fails with
    /// [`SessionError::LeaseHeld`] while another live pen runs a turn in the session.
    pub async fn acquire(
        store: Arc<SessionStore>,
        session_id: &str,
    ) -> Result<TurnLease, SessionError> {
        let owner = LeaseOwner::this_process();
        let taking = Arc::clone(&store);
        let id = session_id.to_owned();
        match tokio::task::spawn_blocking(move || taking.acquire_lease(&id, owner)).await {
            Ok(taken) => taken?,
            // A panic in the store is the caller's to catch, as if the call had been inline.
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            // The runtime is shutting down: no turn will run.
            Err(_) => return Err(SessionError::LeaseNotHeld(session_id.to_owned())),
        }
        let lost = CancellationToken::new();
        let heartbeat = tokio::spawn(heartbeat(
            Arc::clone(&store),
            session_id.to_owned(),
            lost.clone(),
        ));
        Ok(TurnLease {
            store,
            session_id: session_id.to_owned(),
            heartbeat,
            lost,
            released: false,
        })
    }

    /// Fires if the lease is lost while the turn runs.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Stops the heartbeat and gives the lease up.
    pub async fn release(mut self) {
        self.heartbeat.abort();
        self.released = true;
        let store = Arc::clone(&self.store);
        let id = self.session_id.clone();
        let released = tokio::task::spawn_blocking(move || {
            store.release_lease(&id, LeaseOwner::this_process())
        })
        .await;
        if !matches!(released, Ok(Ok(()))) {
            // The lease expires by itself once its heartbeat is old; nothing is lost meanwhile
            // but the chance to prompt this session from another pen.
            tracing::warn!(session = %self.session_id, "could not release the session lease: {released:?}");
        }
    }
}

impl Drop for TurnLease {
    fn drop(&mut self) {
        self.heartbeat.abort();
        if self.released {
            return;
        }
        let store = Arc::clone(&self.store);
        let id = std::mem::take(&mut self.session_id);
        let release = move || {
            if let Err(error) = store.release_lease(&id, LeaseOwner::this_process()) {
                tracing::warn!(session = %id, "could not release the session lease: {error}");
            }
        };
        // Dropped on the runtime (a caller that gave up early): release on a blocking thread,
        // never on the runtime's own.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(release);
            }
            Err(_) => release(),
        }
    }
}

/// Renews the lease every [`SESSION_LEASE_HEARTBEAT`] until aborted, or until a renewal finds
/// it gone (then `lost` fires). A failed renewal (a busy database) is tried again at the next
/// beat: the lease only expires after many missed beats.
async fn heartbeat(store: Arc<SessionStore>, session_id: String, lost: CancellationToken) {
    let mut interval = tokio::time::interval(SESSION_LEASE_HEARTBEAT);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate; the lease was just taken.
    interval.tick().await;
    loop {
        interval.tick().await;
        let renewing = Arc::clone(&store);
        let id = session_id.clone();
        let renewed = tokio::task::spawn_blocking(move || {
            renewing.renew_lease(&id, LeaseOwner::this_process())
        })
        .await;
        match renewed {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => {
                tracing::error!(session = %session_id, "the session lease was taken over by another pen; stopping the turn");
                lost.cancel();
                return;
            }
            Ok(Err(error)) => {
                tracing::warn!(session = %session_id, "could not renew the session lease: {error}")
            }
            Err(error) => {
                tracing::warn!(session = %session_id, "could not renew the session lease: {error}")
            }
        }
    }
}
