use agent_airlock::airlock_tool;

use agent_airlock::CallContext;

/// Look something up.
#[airlock_tool]
fn lookup(#[inject] context: &CallContext, id: u64) -> u64 {
    let _ = context;
    id
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
