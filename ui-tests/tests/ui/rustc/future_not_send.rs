use std::rc::Rc;

use agent_airlock::airlock_tool;

/// Count, holding an `Rc` across an await: the future is not `Send`.
#[airlock_tool]
async fn count(start: u32) -> u32 {
    let shared = Rc::new(start);
    std::future::ready(()).await;
    *shared + 1
}

fn main() {
    let _ = agent_airlock::tool!(count);
}
