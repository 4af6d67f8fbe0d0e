use agent_airlock::airlock_tool;

/// A payee the model can send but the effect key cannot be rendered from: `Deserialize` without
/// `Serialize`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Payee {
    pub iban: String,
}

/// Pay someone.
#[airlock_tool(effect = "pay:{to}")]
fn pay(to: Payee, note: String) -> String {
    format!("{} {note}", to.iban)
}

fn main() {
    let _ = agent_airlock::tool!(pay);
}
