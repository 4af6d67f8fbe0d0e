use agent_airlock::airlock_tool;

/// Host state, passed bare instead of as `State<Crm>`.
pub struct Crm {
    pub offset: u64,
}

/// Look something up.
#[airlock_tool]
fn lookup(#[inject] crm: Crm, id: u64) -> u64 {
    crm.offset + id
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
