//! A crash after every effect of a claim's life with a spot notice: the
//! claim written, the launch (before its status), each status write, the
//! node's registration, the notice's record (condition, then cordon), the
//! checkpoint request, the eviction, the deletion, the termination (before
//! the node and the finalizer go), the replacement's launch, ... The
//! controller process is replaced after the crash (new loop, new core, new
//! notice memory) and must finish the life with every invariant of
//! [`Harness::check_invariants`] holding.

use super::harness::{interrupted_life, Cloud, Harness};
use crate::support::fake_api::FakeApi;

/// One life, crashing after effect `crash_at` (never when `None`); its
/// effects and restarts.
async fn life(crash_at: Option<usize>) -> (usize, usize) {
    let api = FakeApi::new();
    if let Some(n) = crash_at {
        api.crash_after(n);
    }
    let cloud = Cloud::new(&api);
    let mut h = Harness::new(api, cloud);
    let at = format!("crash after effect {crash_at:?}");
    assert!(
        interrupted_life(&mut h, 200).await,
        "{at}: the life did not complete: {}",
        h.dump()
    );
    h.check_invariants(1, &at);
    let effects = h.api.state.lock().unwrap().effects;
    (effects, h.restarts)
}

#[tokio::test]
async fn a_crash_after_any_effect_of_launch_notice_checkpoint_and_drain_loses_and_doubles_nothing()
{
    let (effects, restarts) = life(None).await;
    assert_eq!(restarts, 0);
    assert!(effects >= 10, "{effects} effects");
    let mut crashes = 0;
    for n in 1..=effects {
        let (_, restarts) = life(Some(n)).await;
        assert!(restarts <= 1, "crash after {n}: {restarts} restarts");
        crashes += restarts;
    }
    println!("crashes injected: {crashes} (one after each of {effects} effects)");
    // Every crash point is reached (a run may take another path after
    // an earlier retry, so allow a few to fall past its end).
    assert!(crashes * 10 >= effects * 9, "{crashes} of {effects}");
}
