//! What can be masked: the kinds of secret and personal data, and sets of them with their string grammar
//! (`mask = "secrets,pii"`).

use std::fmt;
use std::ops::{BitOr, BitOrAssign};
use std::str::FromStr;

/// One kind of secret or personal data the masker recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum MaskKind {
    /// A PEM private key block (`-----BEGIN … PRIVATE KEY-----`), also when truncated.
    PrivateKey,
    /// A JSON Web Token (`eyJ….eyJ….sig`) whose header decodes to a JSON object with `"alg"`.
    Jwt,
    /// The credentials after `Bearer`, or after `Authorization: Basic`.
    BearerToken,
    /// An Anthropic API key (`sk-ant-…`).
    AnthropicKey,
    /// An OpenAI API key (`sk-…`, `sk-proj-…`, `sk-svcacct-…`).
    OpenAiKey,
    /// A Google API key (`AIza…`).
    GoogleApiKey,
    /// A GitHub token (`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_`, `github_pat_`).
    GitHubToken,
    /// A Slack token (`xoxb-…`, `xoxp-…`) or the secret path of a Slack webhook URL.
    SlackToken,
    /// A Stripe secret or restricted key (`sk_live_…`, `rk_test_…`) or webhook secret (`whsec_…`).
    StripeKey,
    /// An AWS access key id (`AKIA…`, `ASIA…`).
    AwsAccessKey,
    /// The password in a URL or connection string (`postgres://user:PASSWORD@host`).
    ConnectionPassword,
    /// A value labelled as a secret: `password=…`, `secret: …`, `"api_key": "…"`, `token=…`.
    SecretValue,
    /// An e-mail address.
    Email,
    /// A phone number: international (`+44 20 7946 0958`), North American (`(415) 555-2671`), national with a
    /// leading `0`, or any digits labelled as a phone.
    Phone,
    /// A payment card number: 13 to 19 digits, a known network prefix, the Luhn check.
    PaymentCard,
    /// An IBAN with a valid country length and mod-97 checksum.
    Iban,
    /// A US social security number in a valid area/group/serial range: `123-45-6789`, or 9 digits labelled
    /// as an SSN.
    UsSsn,
    /// An IPv4 address, unless it reads as a version number. Not part of [`MaskSet::PII`]: opt in by name.
    IpAddress,
}

impl MaskKind {
    /// Every kind, in the order of their bits.
    pub const ALL: [MaskKind; 18] = [
        MaskKind::PrivateKey,
        MaskKind::Jwt,
        MaskKind::BearerToken,
        MaskKind::AnthropicKey,
        MaskKind::OpenAiKey,
        MaskKind::GoogleApiKey,
        MaskKind::GitHubToken,
        MaskKind::SlackToken,
        MaskKind::StripeKey,
        MaskKind::AwsAccessKey,
        MaskKind::ConnectionPassword,
        MaskKind::SecretValue,
        MaskKind::Email,
        MaskKind::Phone,
        MaskKind::PaymentCard,
        MaskKind::Iban,
        MaskKind::UsSsn,
        MaskKind::IpAddress,
    ];

    /// Number of kinds.
    pub const COUNT: usize = MaskKind::ALL.len();

    /// The kind's name in the `mask = "…"` grammar and in reports, e.g. `"payment_card"`.
    pub const fn name(self) -> &'static str {
        match self {
            MaskKind::PrivateKey => "private_key",
            MaskKind::Jwt => "jwt",
            MaskKind::BearerToken => "bearer_token",
            MaskKind::AnthropicKey => "anthropic_key",
            MaskKind::OpenAiKey => "openai_key",
            MaskKind::GoogleApiKey => "google_api_key",
            MaskKind::GitHubToken => "github_token",
            MaskKind::SlackToken => "slack_token",
            MaskKind::StripeKey => "stripe_key",
            MaskKind::AwsAccessKey => "aws_access_key",
            MaskKind::ConnectionPassword => "connection_password",
            MaskKind::SecretValue => "secret_value",
            MaskKind::Email => "email",
            MaskKind::Phone => "phone",
            MaskKind::PaymentCard => "payment_card",
            MaskKind::Iban => "iban",
            MaskKind::UsSsn => "us_ssn",
            MaskKind::IpAddress => "ip_address",
        }
    }

    /// The text the runtime's type-tag masking writes, e.g. `"[PAYMENT_CARD]"`.
    pub const fn tag(self) -> &'static str {
        match self {
            MaskKind::PrivateKey => "[PRIVATE_KEY]",
            MaskKind::Jwt => "[JWT]",
            MaskKind::BearerToken => "[BEARER_TOKEN]",
            MaskKind::AnthropicKey => "[ANTHROPIC_KEY]",
            MaskKind::OpenAiKey => "[OPENAI_KEY]",
            MaskKind::GoogleApiKey => "[GOOGLE_API_KEY]",
            MaskKind::GitHubToken => "[GITHUB_TOKEN]",
            MaskKind::SlackToken => "[SLACK_TOKEN]",
            MaskKind::StripeKey => "[STRIPE_KEY]",
            MaskKind::AwsAccessKey => "[AWS_ACCESS_KEY]",
            MaskKind::ConnectionPassword => "[CONNECTION_PASSWORD]",
            MaskKind::SecretValue => "[SECRET_VALUE]",
            MaskKind::Email => "[EMAIL]",
            MaskKind::Phone => "[PHONE]",
            MaskKind::PaymentCard => "[PAYMENT_CARD]",
            MaskKind::Iban => "[IBAN]",
            MaskKind::UsSsn => "[US_SSN]",
            MaskKind::IpAddress => "[IP_ADDRESS]",
        }
    }

    /// Whether the kind belongs to [`MaskSet::SECRETS`].
    pub const fn is_secret(self) -> bool {
        MaskSet::SECRETS.contains_kind(self)
    }

    /// The kind named `name` (see [`MaskKind::name`]).
    pub fn from_name(name: &str) -> Option<MaskKind> {
        MaskKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// The kind's position in [`MaskKind::ALL`] (and its bit in a [`MaskSet`]).
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for MaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for MaskKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// Which kinds of data are masked: a set of [`MaskKind`]s.
///
/// Written in the attribute as `mask = "secrets,pii"`: a comma-separated list of [`MASK_SET_NAMES`], or
/// `"none"` alone. A deployment policy can only add to a tool's set ([`MaskSet::union`]), never remove.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MaskSet(u32);

const fn bit(kind: MaskKind) -> u32 {
    1 << kind as u32
}

impl MaskSet {
    /// Nothing is masked.
    pub const NONE: MaskSet = MaskSet(0);
    /// Provider API keys, tokens, JWTs, private keys, connection-string passwords and labelled secrets.
    pub const SECRETS: MaskSet = MaskSet(
        bit(MaskKind::PrivateKey)
            | bit(MaskKind::Jwt)
            | bit(MaskKind::BearerToken)
            | bit(MaskKind::AnthropicKey)
            | bit(MaskKind::OpenAiKey)
            | bit(MaskKind::GoogleApiKey)
            | bit(MaskKind::GitHubToken)
            | bit(MaskKind::SlackToken)
            | bit(MaskKind::StripeKey)
            | bit(MaskKind::AwsAccessKey)
            | bit(MaskKind::ConnectionPassword)
            | bit(MaskKind::SecretValue),
    );
    /// E-mail addresses, phone numbers, payment cards, IBANs and US SSNs. IP addresses are not included:
    /// in tool output they are mostly infrastructure, and masking them breaks operations tools; name
    /// `ip_address` to add them.
    pub const PII: MaskSet = MaskSet(
        bit(MaskKind::Email)
            | bit(MaskKind::Phone)
            | bit(MaskKind::PaymentCard)
            | bit(MaskKind::Iban)
            | bit(MaskKind::UsSsn),
    );
    /// Every kind, IP addresses included.
    pub const ALL: MaskSet = MaskSet((1 << MaskKind::COUNT as u32) - 1);

    /// The set holding only `kind`.
    pub const fn of(kind: MaskKind) -> MaskSet {
        MaskSet(bit(kind))
    }

    /// Every kind in `self` or in `other`.
    #[must_use]
    pub const fn union(self, other: MaskSet) -> MaskSet {
        MaskSet(self.0 | other.0)
    }

    /// The kinds in both `self` and `other`.
    #[must_use]
    pub const fn intersection(self, other: MaskSet) -> MaskSet {
        MaskSet(self.0 & other.0)
    }

    /// The kinds in `self` and not in `other`.
    #[must_use]
    pub const fn difference(self, other: MaskSet) -> MaskSet {
        MaskSet(self.0 & !other.0)
    }

    /// Whether every kind of `other` is in `self`.
    pub const fn contains(self, other: MaskSet) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether `kind` is in the set.
    pub const fn contains_kind(self, kind: MaskKind) -> bool {
        self.0 & bit(kind) != 0
    }

    /// Whether the set masks nothing.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The kinds in the set, in [`MaskKind::ALL`] order.
    pub fn kinds(self) -> impl Iterator<Item = MaskKind> {
        MaskKind::ALL.into_iter().filter(move |kind| self.contains_kind(*kind))
    }

    /// The set one name of the grammar stands for: a family (`none`, `all`, `secrets`, `pii`) or a kind
    /// ([`MaskKind::name`]).
    pub fn named(name: &str) -> Option<MaskSet> {
        match name {
            "none" => Some(MaskSet::NONE),
            "all" => Some(MaskSet::ALL),
            "secrets" => Some(MaskSet::SECRETS),
            "pii" => Some(MaskSet::PII),
            other => MaskKind::from_name(other).map(MaskSet::of),
        }
    }
}

/// Every name the `mask = "…"` grammar accepts: the families, then each kind's [`MaskKind::name`].
pub const MASK_SET_NAMES: &[&str] = &[
    "none",
    "all",
    "secrets",
    "pii",
    "private_key",
    "jwt",
    "bearer_token",
    "anthropic_key",
    "openai_key",
    "google_api_key",
    "github_token",
    "slack_token",
    "stripe_key",
    "aws_access_key",
    "connection_password",
    "secret_value",
    "email",
    "phone",
    "payment_card",
    "iban",
    "us_ssn",
    "ip_address",
];

impl BitOr for MaskSet {
    type Output = MaskSet;

    fn bitor(self, other: MaskSet) -> MaskSet {
        self.union(other)
    }
}

impl BitOrAssign for MaskSet {
    fn bitor_assign(&mut self, other: MaskSet) {
        *self = self.union(other);
    }
}

impl From<MaskKind> for MaskSet {
    fn from(kind: MaskKind) -> MaskSet {
        MaskSet::of(kind)
    }
}

impl fmt::Debug for MaskSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MaskSet({self})")
    }
}

/// The canonical spelling, which parses back to the same set: `none`, `all`, or families then kinds.
impl fmt::Display for MaskSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        if *self == MaskSet::ALL {
            return f.write_str("all");
        }
        let mut rest = *self;
        let mut first = true;
        let mut write = |f: &mut fmt::Formatter<'_>, name: &str| {
            let separator = if first { "" } else { "," };
            first = false;
            write!(f, "{separator}{name}")
        };
        for (family, name) in [(MaskSet::SECRETS, "secrets"), (MaskSet::PII, "pii")] {
            if rest.contains(family) {
                write(f, name)?;
                rest = MaskSet(rest.0 & !family.0);
            }
        }
        for kind in rest.kinds() {
            write(f, kind.name())?;
        }
        Ok(())
    }
}

/// A `mask = "…"` value that does not parse; its `Display` is the complete, user-facing message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MaskSetParseError {
    /// A name between commas is empty (`"secrets,"`).
    EmptyName {
        /// The whole text.
        text: String,
    },
    /// A name the grammar does not know.
    UnknownName {
        /// The name as written.
        name: String,
    },
    /// `none` with other names.
    NoneCombined {
        /// The whole text.
        text: String,
    },
}

impl fmt::Display for MaskSetParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaskSetParseError::EmptyName { text } => {
                write!(f, "empty name in mask set `{text}`, expected comma-separated names such as `secrets,pii`")
            }
            MaskSetParseError::UnknownName { name } => {
                let expected = MASK_SET_NAMES.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
                write!(f, "unknown mask set `{name}`, expected one of {expected}")
            }
            MaskSetParseError::NoneCombined { text } => {
                write!(f, "`none` cannot be combined with other mask sets in `{text}`")
            }
        }
    }
}

impl std::error::Error for MaskSetParseError {}

impl FromStr for MaskSet {
    type Err = MaskSetParseError;

    /// `"secrets,pii"`, `"secrets"`, `"pii"`, `"all"`, `"none"`, or kind names such as `"email,iban"`;
    /// spaces around names are allowed, `none` cannot be combined with other names.
    fn from_str(text: &str) -> Result<MaskSet, MaskSetParseError> {
        let mut set = MaskSet::NONE;
        let mut saw_none = false;
        let mut count = 0;
        for name in text.split(',').map(str::trim) {
            count += 1;
            if name.is_empty() {
                return Err(MaskSetParseError::EmptyName { text: text.to_owned() });
            }
            let named = MaskSet::named(name).ok_or_else(|| MaskSetParseError::UnknownName { name: name.to_owned() })?;
            saw_none |= name == "none";
            set |= named;
        }
        if saw_none && count > 1 {
            return Err(MaskSetParseError::NoneCombined { text: text.to_owned() });
        }
        Ok(set)
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for MaskSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for MaskSet {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<MaskSet, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;

    #[test]
    fn names_list_matches_the_grammar() {
        for name in MASK_SET_NAMES {
            assert!(MaskSet::named(name).is_some(), "{name}");
        }
        let kinds: Vec<&str> = MaskKind::ALL.iter().map(|kind| kind.name()).collect();
        assert_eq!(&MASK_SET_NAMES[4..], kinds.as_slice());
        for (index, kind) in MaskKind::ALL.into_iter().enumerate() {
            assert_eq!(kind.index(), index);
            assert_eq!(kind.tag(), format!("[{}]", kind.name().to_ascii_uppercase()));
        }
    }

    #[test]
    fn families() {
        assert_eq!(MaskSet::SECRETS.intersection(MaskSet::PII), MaskSet::NONE);
        assert_eq!(MaskSet::SECRETS | MaskSet::PII | MaskSet::of(MaskKind::IpAddress), MaskSet::ALL);
        assert!(MaskKind::Jwt.is_secret());
        assert!(!MaskKind::Email.is_secret());
        assert!(!MaskSet::PII.contains_kind(MaskKind::IpAddress));
        assert_eq!(MaskSet::ALL.kinds().count(), MaskKind::COUNT);
        assert_eq!(
            MaskSet::ALL.difference(MaskSet::PII).difference(MaskSet::of(MaskKind::IpAddress)),
            MaskSet::SECRETS
        );
        for kind in MaskKind::ALL {
            let left = MaskSet::ALL.difference(MaskSet::of(kind));
            assert!(!left.contains_kind(kind) && left.kinds().count() == MaskKind::COUNT - 1, "{kind}");
        }
    }

    #[test]
    fn parses_the_grammar() {
        assert_eq!("secrets,pii".parse(), Ok(MaskSet::SECRETS | MaskSet::PII));
        assert_eq!(" secrets , pii ".parse(), Ok(MaskSet::SECRETS | MaskSet::PII));
        assert_eq!("none".parse(), Ok(MaskSet::NONE));
        assert_eq!("all".parse(), Ok(MaskSet::ALL));
        assert_eq!("email,iban".parse(), Ok(MaskSet::of(MaskKind::Email) | MaskSet::of(MaskKind::Iban)));
        assert_eq!("pii,pii".parse(), Ok(MaskSet::PII));
    }

    #[test]
    fn rejects_bad_values() {
        let err = "secrets,pi".parse::<MaskSet>().unwrap_err().to_string();
        assert!(err.starts_with("unknown mask set `pi`, expected one of `none`, `all`, `secrets`, `pii`"), "{err}");
        assert!("".parse::<MaskSet>().is_err());
        assert!("secrets,".parse::<MaskSet>().is_err());
        assert!("none,pii".parse::<MaskSet>().unwrap_err().to_string().contains("cannot be combined"));
        assert!("Secrets".parse::<MaskSet>().is_err());
    }

    #[test]
    fn display_round_trips() {
        let samples = [
            MaskSet::NONE,
            MaskSet::ALL,
            MaskSet::SECRETS,
            MaskSet::PII,
            MaskSet::SECRETS | MaskSet::PII,
            MaskSet::PII | MaskSet::of(MaskKind::IpAddress),
            MaskSet::of(MaskKind::Jwt) | MaskSet::of(MaskKind::Email),
        ];
        for set in samples {
            assert_eq!(set.to_string().parse::<MaskSet>(), Ok(set), "{set}");
        }
        assert_eq!((MaskSet::SECRETS | MaskSet::PII).to_string(), "secrets,pii");
        assert_eq!(format!("{:?}", MaskSet::PII), "MaskSet(pii)");
    }

    #[cfg(feature = "serde")]
    #[test]
    fn serde_uses_the_grammar() {
        let set = MaskSet::SECRETS | MaskSet::of(MaskKind::Email);
        let json = serde_json::to_string(&set).unwrap();
        assert_eq!(json, "\"secrets,email\"");
        assert_eq!(serde_json::from_str::<MaskSet>(&json).unwrap(), set);
        assert!(serde_json::from_str::<MaskSet>("\"bogus\"").is_err());
    }
}
