use agent_airlock::airlock_tool;

pub struct Crm;

impl Crm {
    /// Look a customer up.
    #[airlock_tool]
    pub fn lookup(&self, id: u64) -> u64 {
        id
    }
}

fn main() {
    let _ = Crm.lookup(1);
}
