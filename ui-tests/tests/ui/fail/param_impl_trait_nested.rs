use agent_airlock::airlock_tool;

/// Look something up.
#[airlock_tool]
fn lookup(ids: Vec<impl std::fmt::Display>) -> usize {
    ids.len()
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
