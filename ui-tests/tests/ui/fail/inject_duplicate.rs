use agent_airlock::airlock_tool;

use agent_airlock::State;

pub struct Crm {
    pub offset: u64,
}

/// Look something up.
#[airlock_tool]
fn lookup(#[inject] #[inject] crm: State<Crm>, id: u64) -> u64 {
    crm.offset + id
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
