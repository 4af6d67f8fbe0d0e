use agent_airlock::airlock_tool;

#[airlock_tool(description = "")]
fn lookup(id: u64) -> u64 {
    id
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
