//! What an object key says about its value: `"password": "hunter2"` is a secret although `hunter2` alone is
//! just a word, and `"phone": 4155552671` is a phone although ten bare digits are usually a timestamp.

use std::sync::LazyLock;

/// The kind an object key announces for its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyHint {
    None,
    Secret,
    Phone,
    Ssn,
    Card,
    /// Basic credentials if the value is base64 of `user:password` (Docker's `"auth"`, npm's `_auth`).
    Basic,
    /// Every member of the object under this key is a secret: a Kubernetes Secret's `data` and `stringData`
    /// ([`is_kubernetes_secret`]); any other value under it is one.
    SecretMembers,
}

/// Longest key looked at, in letters and digits; a longer key announces nothing.
const MAX_KEY_LEN: usize = 64;

/// The key's ASCII letters and digits, lower-cased, in `buffer`: `DB_Password`, `db-password` and
/// `dbPassword` are all `dbpassword`. `None` when the key is longer than [`MAX_KEY_LEN`]. Bytes, not a `str`:
/// they are ASCII, and checking so again costs more than the comparisons that follow (this runs for every key).
fn normalised<'b>(key: &str, buffer: &'b mut [u8; MAX_KEY_LEN]) -> Option<&'b [u8]> {
    let mut len = 0;
    for byte in key.bytes().filter(u8::is_ascii_alphanumeric) {
        *buffer.get_mut(len)? = byte.to_ascii_lowercase();
        len += 1;
    }
    Some(&buffer[..len])
}

/// Words that end a key naming a secret.
const SECRET_SUFFIXES: &[&str] = &[
    "password",
    "passwords",
    "passwd",
    "passphrase",
    "passcode",
    "secret",
    "secrets",
    "token",
    "apikey",
    "apikeys",
    "privatekey",
    "secretkey",
    "accesskey",
    "signingkey",
    "encryptionkey",
    "masterkey",
    "accountkey",
    "credential",
    "credentials",
];

/// Words that may follow a secret's name in a key without changing what it names: which one (`password_new`,
/// `password_old`, `password_confirm`), where it is used (`DB_PASSWORD_PROD`, `token_dev`), or in what form it is
/// given (`SECRET_KEY_BASE`, `password_hash`, `token_b64`); digits and a version (`secret_1`, `GITHUB_TOKEN_2`,
/// `api_key_v2`) are read past too. A key ending in a word that *describes* the secret (`password_hint`,
/// `token_type`, `secret_name`, `api_key_id`, `token_file`, `token_expiry`) still names none. At most
/// [`MAX_QUALIFIERS`] are read past. Words whose last three letters end many ordinary keys are left out
/// (`production` and `version`, `staging` and `string`, `current` and `content`, `default` and `result`,
/// `value`): a key ending like a qualifier is read in full, once per value masked. The labelled-value pattern of text lists the same
/// (`detect::PATTERNS`, kept in step by a test here).
pub(crate) const SECRET_QUALIFIERS: &[&str] = &[
    "old", "new", "prev", "previous", "curr", "prod", "stg", "dev", "test", "uat", "tmp", "temp", "confirm", "base",
    "hash", "b64", "base64", "hex", "raw", "enc", "str",
];

/// How many qualifiers (and runs of digits) a key's secret name may be followed by: `DB_PASSWORD_PROD_2_OLD`.
const MAX_QUALIFIERS: usize = 3;

/// The normalised `key` without the qualifiers that may follow a secret's name ([`SECRET_QUALIFIERS`], digits,
/// a version `v2`), at most [`MAX_QUALIFIERS`] of them: `dbpasswordprod2` is `dbpassword`. Never empty.
pub(crate) fn without_qualifiers(key: &[u8]) -> &[u8] {
    let mut stem = key;
    for _ in 0..MAX_QUALIFIERS {
        let digits = stem.iter().rev().take_while(|b| b.is_ascii_digit()).count();
        let mut shorter = &stem[..stem.len() - digits];
        if let Some(word) = SECRET_QUALIFIERS.iter().find(|word| shorter.ends_with(word.as_bytes())) {
            shorter = &shorter[..shorter.len() - word.len()];
        } else if digits > 0
            && let Some(rest) = shorter.strip_suffix(b"v")
        {
            // A version: `v2`.
            shorter = rest;
        }
        if shorter.len() == stem.len() || shorter.is_empty() {
            break;
        }
        stem = shorter;
    }
    stem
}

/// The variables agent-airlock itself reads keys, tokens and database URLs from: their values are secrets
/// wherever they turn up (an upstream server that prints its environment, a log line), in a `NAME=value`
/// text or as an object's key, though some of the names end in no secret's word (`AIRLOCK_DB`).
pub(crate) const PRODUCT_SECRET_NAMES: &[&str] = &[
    "AIRLOCK_APPROVAL_KEY",
    "AIRLOCK_GATEWAY_TOKEN",
    "AIRLOCK_CONSOLE_TOKEN",
    "AIRLOCK_WEBHOOK_KEY",
    "AIRLOCK_AUDIT_KEY",
    "AIRLOCK_DB",
    "AIRLOCK_MCP_LEDGER",
];

/// Whether the normalised `key` is one of [`PRODUCT_SECRET_NAMES`].
fn is_product_secret(key: &[u8]) -> bool {
    // Every name starts so; most keys are refused here, before the names are normalised one by one.
    key.starts_with(b"airlock")
        && PRODUCT_SECRET_NAMES.iter().any(|name| {
            name.bytes().filter(u8::is_ascii_alphanumeric).map(|b| b.to_ascii_lowercase()).eq(key.iter().copied())
        })
}

impl KeyHint {
    /// The hint a key gives, from its letters and digits, lower-cased (`DB_Password`, `db-password` and
    /// `dbPassword` are all `dbpassword`).
    ///
    /// The hint of an object's key, or of a name member's text: none if a masker wrote it.
    pub(crate) fn of_member(key: &str) -> KeyHint {
        // Most keys are answered from their last three letters and digits, read backwards, before any copy.
        if !passes_the_tail_screen(key) {
            return KeyHint::None;
        }
        KeyHint::of_screened_member(key)
    }

    /// [`KeyHint::of_member`] of a key that passed the tail screen.
    fn of_screened_member(key: &str) -> KeyHint {
        let mut buffer = [0u8; MAX_KEY_LEN];
        // A key that can name nothing needs no look at whether a masker wrote it.
        match normalised(key, &mut buffer) {
            Some(normal) if may_name_a_kind(normal) && !is_masker_output(key) => KeyHint::of_normalised(normal),
            _ => KeyHint::None,
        }
    }

    /// A key *naming* a secret marks its value (`password`, `DB_PASSWORD`, `api_key`, `client_secret`,
    /// `private_key`, `access_token`, `Proxy-Authorization`, `Cookie`), also with a qualifier after the name
    /// (`password_new`, `DB_PASSWORD_PROD`, `SECRET_KEY_BASE`, `GITHUB_TOKEN_2`: [`SECRET_QUALIFIERS`]). A key
    /// *describing* one does not: `password_hint`, `password_policy`, `token_count`, `token_type`, `max_tokens`,
    /// `next_page_token`, `secret_name`, `is_secret`, `has_password` (a hint is shown to users by design; a flag
    /// or a count is not the secret).
    #[cfg(test)]
    pub(crate) fn of_key(key: &str) -> KeyHint {
        // Normalised on the stack: this runs for every key of every result.
        let mut buffer = [0u8; MAX_KEY_LEN];
        match normalised(key, &mut buffer) {
            Some(normal) if may_name_a_kind(normal) => KeyHint::of_normalised(normal),
            _ => KeyHint::None,
        }
    }

    /// [`KeyHint::of_key`] of a normalised key, every rule read in order.
    fn of_normalised(key: &[u8]) -> KeyHint {
        let ends = |suffixes: &[&str]| suffixes.iter().any(|suffix| key.ends_with(suffix.as_bytes()));
        let is = |names: &[&str]| names.iter().any(|name| name.as_bytes() == key);
        // A secret's name, read past its qualifiers (not the whole names: `pin1` is a board's pin).
        let stem = without_qualifiers(key);
        let stem_ends = |suffixes: &[&str]| suffixes.iter().any(|suffix| stem.ends_with(suffix.as_bytes()));

        if stem_ends(PUBLIC_TOKEN_SUFFIXES)
            || COUNTER_PREFIXES.iter().any(|counter| key.starts_with(counter.as_bytes()))
        {
            return KeyHint::None;
        }
        // A flag about a secret: `is_secret`, `has_password`, `isToken`.
        if ["is", "has"].iter().any(|flag| {
            key.strip_prefix(flag.as_bytes())
                .is_some_and(|rest| SECRET_SUFFIXES.iter().any(|suffix| suffix.as_bytes() == rest))
        }) {
            return KeyHint::None;
        }
        if stem_ends(SECRET_SUFFIXES) || is_product_secret(key) || is(SECRET_NAMES) {
            return KeyHint::Secret;
        }
        if ends(PHONE_SUFFIXES) || is(PHONE_NAMES) {
            return KeyHint::Phone;
        }
        if ends(SSN_SUFFIXES) || is(SSN_NAMES) {
            return KeyHint::Ssn;
        }
        if ends(CARD_SUFFIXES) || is(CARD_NAMES) {
            return KeyHint::Card;
        }
        if is(BASIC_NAMES) {
            return KeyHint::Basic;
        }
        KeyHint::None
    }
}

/// [`KeyHint::of_member`] remembered for the keys that passed the tail screen, within one JSON value: the records
/// of an array repeat their keys (`phone`, `version`), and each such key otherwise has every rule read again in
/// every record. The hint is a function of the key alone, so a remembered one is the one reading it again gives.
#[derive(Default)]
pub(crate) struct MemberHints {
    known: Vec<(Box<str>, KeyHint)>,
}

impl MemberHints {
    /// Keys remembered at most: a value with more distinct keys reads the rest each time, as before.
    const CAPACITY: usize = 16;

    /// [`KeyHint::of_member`] of `key`.
    pub(crate) fn of_member(&mut self, key: &str) -> KeyHint {
        if !passes_the_tail_screen(key) {
            return KeyHint::None;
        }
        if let Some(&(_, hint)) = self.known.iter().find(|(known, _)| **known == *key) {
            return hint;
        }
        let hint = KeyHint::of_screened_member(key);
        // A key longer than any that can name a kind gives none: not worth a copy.
        if self.known.len() < Self::CAPACITY && key.len() <= MAX_KEY_LEN {
            self.known.push((key.into(), hint));
        }
        hint
    }
}

/// Whether a key's last three letters and digits end one of the words and names a hint is read from, a qualifier
/// a secret's name may be followed by, or a digit.
#[inline]
fn passes_the_tail_screen(key: &str) -> bool {
    normalised_tail(key).is_some_and(is_hint_tail)
}

/// Whether a key ending in `tail` may give a hint ([`passes_the_tail_screen`]).
#[inline]
fn is_hint_tail(tail: [u8; 3]) -> bool {
    tail[2].is_ascii_digit() || HINT_TAILS.binary_search(&packed(tail)).is_ok()
}

/// Three bytes as one integer, in the same order as the bytes compare: a lookup compares integers, not slices.
fn packed(tail: [u8; 3]) -> u32 {
    u32::from_be_bytes([0, tail[0], tail[1], tail[2]])
}

/// Keys that end like a secret's but name a page's or a sync's position, and the starts of a count's name.
const PUBLIC_TOKEN_SUFFIXES: &[&str] = &["pagetoken", "nexttoken", "continuationtoken", "synctoken", "cursortoken"];
const COUNTER_PREFIXES: &[&str] = &["max", "min", "num", "total", "count"];

/// Whole keys that name a secret, a phone, an SSN, a card; and the words that end a key naming the last three.
const SECRET_NAMES: &[&str] =
    &["pin", "cvv", "cvv2", "cvc", "securitycode", "otp", "authorization", "proxyauthorization", "cookie", "setcookie"];
const PHONE_SUFFIXES: &[&str] =
    &["phone", "phones", "phonenumber", "phonenumbers", "phoneno", "mobile", "mobilenumber", "fax", "faxnumber"];
const PHONE_NAMES: &[&str] = &["tel", "telephone", "cell", "msisdn"];
const SSN_SUFFIXES: &[&str] = &["ssn", "ssns", "socialsecuritynumber", "socialsecurityno"];
const SSN_NAMES: &[&str] = &["socialsecurity"];
const CARD_SUFFIXES: &[&str] = &["cardnumber", "cardnumbers", "cardno", "creditcard", "debitcard"];
const CARD_NAMES: &[&str] = &["pan", "ccnumber", "primaryaccountnumber"];
/// Whole keys whose value may be Basic credentials ([`KeyHint::Basic`]).
const BASIC_NAMES: &[&str] = &["auth"];

/// The last three bytes of every word and name a hint is read from, and of every qualifier a secret's name may
/// be followed by, sorted: a normalised key ending in none of them (nor in a digit) gives no hint whatever else
/// it holds, since every rule that gives one holds only when the key ends in one of those (each at least three
/// bytes long). One lookup then answers most keys of a result (`id`,
/// `email`, `status`), where reading every rule costs a few hundred instructions per key.
static HINT_TAILS: LazyLock<Vec<u32>> = LazyLock::new(|| {
    let normalised_product_names: Vec<Vec<u8>> = PRODUCT_SECRET_NAMES
        .iter()
        .map(|name| name.bytes().filter(u8::is_ascii_alphanumeric).map(|b| b.to_ascii_lowercase()).collect())
        .collect();
    let words = [
        SECRET_SUFFIXES,
        SECRET_NAMES,
        PHONE_SUFFIXES,
        PHONE_NAMES,
        SSN_SUFFIXES,
        SSN_NAMES,
        CARD_SUFFIXES,
        CARD_NAMES,
        BASIC_NAMES,
        SECRET_QUALIFIERS,
    ]
    .into_iter()
    .flatten()
    .map(|word| word.as_bytes())
    .chain(normalised_product_names.iter().map(Vec::as_slice));
    let mut tails: Vec<u32> = words.filter_map(tail).map(packed).collect();
    tails.sort_unstable();
    tails.dedup();
    tails
});

/// The last three bytes of `key`; `None` when it is shorter.
fn tail(key: &[u8]) -> Option<[u8; 3]> {
    key.len().checked_sub(3).and_then(|at| key[at..].try_into().ok())
}

/// The last three bytes of `key` normalised ([`normalised`]'s last three, whatever its length), read from the
/// end; `None` when it has fewer than three letters and digits.
fn normalised_tail(key: &str) -> Option<[u8; 3]> {
    // Most keys end in three letters or digits: those are the tail.
    if let [.., a, b, c] = *key.as_bytes()
        && a.is_ascii_alphanumeric()
        && b.is_ascii_alphanumeric()
        && c.is_ascii_alphanumeric()
    {
        return Some([a.to_ascii_lowercase(), b.to_ascii_lowercase(), c.to_ascii_lowercase()]);
    }
    let mut tail = [0u8; 3];
    let mut normal = key.bytes().rev().filter(u8::is_ascii_alphanumeric).map(|b| b.to_ascii_lowercase());
    for slot in tail.iter_mut().rev() {
        *slot = normal.next()?;
    }
    Some(tail)
}

/// Whether the normalised `key` may give a hint: `false` only when [`KeyHint::of_normalised`] gives none.
fn may_name_a_kind(key: &[u8]) -> bool {
    tail(key).is_some_and(is_hint_tail)
}

/// Text a masker wrote (`[EMAIL]`, `[EMAIL]#2`, `[GITHUB_TOKEN:3f2a9c1b]`, `sk-proj-...wxyz`): as a key or
/// a name it names nothing, so masking masked output changes nothing (`[GITHUB_TOKEN]` ends in `token`).
fn is_masker_output(text: &str) -> bool {
    let base = match text.rsplit_once('#') {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => text,
    };
    (base.starts_with('[') && super::detect::is_mask_or_placeholder(base))
        || super::detect::has_three(base, b'.')
        || super::detect::has_three(base, b'*')
}

/// Members that name a sibling: `name` in Kubernetes' `{"name": "DB_PASSWORD", "value": "…"}`, `Key` in
/// AWS tags `{"Key": "api_key", "Value": "…"}`, `ParameterKey` in CloudFormation parameters.
const NAME_MEMBERS: &[&str] = &["name", "key", "parametername", "parameterkey", "variable", "variablename"];

/// Members that hold the value a name member names.
const VALUE_MEMBERS: &[&str] = &["value", "parametervalue", "variablevalue"];

/// Whether `fields` are a Kubernetes Secret's (`kubectl get secret -o json`, the API's objects as a client returns
/// them): `"apiVersion": "v1"` and `"kind": "Secret"`. Every value under its `data` (base64) and `stringData` members
/// is a secret whatever its key (`url`, `config.json`, `tls.key`), as `kubectl` itself hides them in `describe`.
pub(crate) fn is_kubernetes_secret(fields: &serde_json::Map<String, serde_json::Value>) -> bool {
    let string = |key: &str| fields.get(key).and_then(serde_json::Value::as_str);
    string("kind") == Some("Secret") && string("apiVersion") == Some("v1")
}

/// Members of a Kubernetes Secret ([`is_kubernetes_secret`]) whose members are all secrets.
pub(crate) const KUBERNETES_SECRET_MEMBERS: [&str; 2] = ["data", "stringData"];

/// Whether `key` is a member that names its sibling (`name`, `Key`, `ParameterKey`).
pub(crate) fn is_name_member(key: &str) -> bool {
    let mut buffer = [0u8; MAX_KEY_LEN];
    normalised(key, &mut buffer).is_some_and(|key| NAME_MEMBERS.iter().any(|member| member.as_bytes() == key))
}

/// Whether `key` is a member that holds the value its sibling names (`value`, `Value`, `ParameterValue`).
pub(crate) fn is_value_member(key: &str) -> bool {
    // Every one of them ends in `value`.
    if normalised_tail(key) != Some(*b"lue") {
        return false;
    }
    let mut buffer = [0u8; MAX_KEY_LEN];
    normalised(key, &mut buffer).is_some_and(|key| VALUE_MEMBERS.iter().any(|member| member.as_bytes() == key))
}

/// The hint a name/value object gives its value member: what its name member names, read as a key would
/// be (`{"name": "DB_PASSWORD", "value": "…"}` marks the value a secret; `{"name": "token_count", "value":
/// 12}` marks nothing). [`KeyHint::None`] when the object has no string name member or no value member.
pub(crate) fn pair_hint(fields: &serde_json::Map<String, serde_json::Value>) -> KeyHint {
    if !fields.keys().any(|key| is_value_member(key)) {
        return KeyHint::None;
    }
    let mut hint = KeyHint::None;
    for (key, field) in fields {
        if let (true, Some(name)) = (is_name_member(key), field.as_str()) {
            match KeyHint::of_member(name) {
                KeyHint::Secret => return KeyHint::Secret,
                KeyHint::None => {}
                other => hint = other,
            }
        }
    }
    hint
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn the_products_own_secret_names_mark_their_values_as_keys_and_in_text() {
        let masker = crate::mask::Masker::default();
        for name in PRODUCT_SECRET_NAMES {
            assert_eq!(KeyHint::of_key(name), KeyHint::Secret, "{name}");
            let text = format!("{name}=Zq8x/secret-value.redb\nNEXT=1");
            let masked = masker.mask_text(&text, crate::mask::MaskSet::SECRETS);
            assert!(!masked.contains("Zq8x/secret-value.redb"), "{name}: {masked}");
            assert!(masked.starts_with(&format!("{name}=")) && masked.ends_with("NEXT=1"), "{masked}");
        }
        assert_eq!(KeyHint::of_key("AIRLOCK_LOG"), KeyHint::None);
    }

    /// The labelled-value pattern reads past the qualifiers an object's key is read past, all of them and only
    /// those, in text as in JSON: `DB_PASSWORD_PROD=…` is masked as `{"DB_PASSWORD_PROD": "…"}` is.
    #[test]
    fn the_labelled_value_pattern_reads_past_the_qualifiers_keys_are_read_past() {
        crate::mask::detect::assert_the_labelled_value_pattern_lists(SECRET_QUALIFIERS);
        let masker = crate::mask::Masker::default();
        for key in ["password_new", "DB_PASSWORD_PROD", "SECRET_KEY_BASE", "GITHUB_TOKEN_2", "api_key_v2", "SECRET_KEY"]
        {
            assert_eq!(KeyHint::of_key(key), KeyHint::Secret, "{key}");
            for text in
                [format!("{key}=Hunter0correcthorse\nNEXT=1"), format!("export {key}=\"Hunter0 correct horse\"")]
            {
                let masked = masker.mask_text(&text, crate::mask::MaskSet::SECRETS);
                assert!(!masked.contains("Hunter0"), "{text}: {masked}");
                assert!(masked.contains(key), "{masked}");
            }
        }
        for key in ["token_type", "password_hint", "secret_name", "api_key_id", "token_file", "next_page_token_2"] {
            assert_eq!(KeyHint::of_key(key), KeyHint::None, "{key}");
            let text = format!("{key}=Hunter0correcthorse");
            assert_eq!(masker.mask_text(&text, crate::mask::MaskSet::SECRETS), text);
        }
    }

    /// Every word and name a hint is read from, and words that only describe one.
    fn hint_words() -> Vec<&'static str> {
        [SECRET_SUFFIXES, SECRET_NAMES, PHONE_SUFFIXES, PHONE_NAMES, SSN_SUFFIXES, SSN_NAMES, CARD_SUFFIXES, CARD_NAMES]
            .into_iter()
            .flatten()
            .chain(PRODUCT_SECRET_NAMES)
            .chain(PUBLIC_TOKEN_SUFFIXES)
            .chain(COUNTER_PREFIXES)
            .chain(VALUE_MEMBERS)
            .chain(SECRET_QUALIFIERS)
            .chain(&[
                "is", "has", "hint", "name", "value", "key", "id", "email", "version", "x", "ion", "ord", "[EMAIL]",
            ])
            .copied()
            .collect()
    }

    /// A key's hint read with the tail screen and without it (every rule in order).
    fn screened_and_full(key: &str) -> (KeyHint, KeyHint) {
        let mut buffer = [0u8; MAX_KEY_LEN];
        let full = normalised(key, &mut buffer).map_or(KeyHint::None, KeyHint::of_normalised);
        (KeyHint::of_key(key), full)
    }

    #[test]
    fn the_tail_screen_never_hides_a_hint_of_a_listed_word() {
        for word in hint_words() {
            for prefix in ["", "db_", "is", "has", "max_", "next_page_", "X-", "user."] {
                for key in [format!("{prefix}{word}"), format!("{prefix}{word}").to_uppercase()] {
                    let (screened, full) = screened_and_full(&key);
                    assert_eq!(screened, full, "{key}");
                }
            }
        }
    }

    proptest! {
        /// Keys glued from the words hints are read from, separators and random text: the screened hint is the
        /// full one, of a key and of a member (whose masker-output check the screen may skip).
        #[test]
        fn the_tail_screen_gives_every_key_the_full_hint(
            parts in proptest::collection::vec(
                prop_oneof![
                    proptest::sample::select(hint_words()).prop_map(str::to_owned),
                    "[a-zA-Z0-9_. #*\\[\\]-]{0,4}",
                ],
                0..5,
            ),
            upper in any::<bool>(),
        ) {
            let key = parts.concat();
            let key = if upper { key.to_uppercase() } else { key };
            let (screened, full) = screened_and_full(&key);
            prop_assert_eq!(screened, full, "{}", key);
            let member = if is_masker_output(&key) { KeyHint::None } else { full };
            prop_assert_eq!(KeyHint::of_member(&key), member, "{}", key);
            let mut buffer = [0u8; MAX_KEY_LEN];
            let normal = normalised(&key, &mut buffer);
            let value_member = normal.is_some_and(|key| VALUE_MEMBERS.iter().any(|member| member.as_bytes() == key));
            prop_assert_eq!(is_value_member(&key), value_member, "{}", key);
            if let Some(normal) = normal {
                prop_assert_eq!(normalised_tail(&key), tail(normal), "{}", key);
            }
        }
    }

    proptest! {
        /// Keys read in a row, many of them again (the records of an array), more distinct ones than are
        /// remembered: each remembered hint is the one [`KeyHint::of_member`] gives that key.
        #[test]
        fn remembered_hints_are_the_hints_of_their_keys(
            keys in proptest::collection::vec(
                prop_oneof![
                    proptest::sample::select(hint_words()).prop_map(str::to_owned),
                    proptest::sample::select(hint_words()).prop_map(|word| format!("X_{}", word.to_uppercase())),
                    "[a-zA-Z0-9_. #*\\[\\]-]{0,6}(ion|one|ord|key|ken|ssn)",
                ],
                0..60,
            ),
        ) {
            let mut hints = MemberHints::default();
            for key in keys.iter().chain(&keys) {
                prop_assert_eq!(hints.of_member(key), KeyHint::of_member(key), "{}", key);
            }
        }
    }

    #[test]
    fn product_secret_names_are_recognised_normalised() {
        assert!(is_product_secret(b"airlockapprovalkey") && is_product_secret(b"airlockdb"));
        assert!(!is_product_secret(b"airlockdbx") && !is_product_secret(b"approvalkey") && !is_product_secret(b""));
    }

    #[test]
    fn keys() {
        for key in ["password", "DB_PASSWORD", "dbPassword", "client_secret", "api-key", "access_token", "pin", "cvv"] {
            assert_eq!(KeyHint::of_key(key), KeyHint::Secret, "{key}");
        }
        for key in ["next_page_token", "max_tokens", "token_count", "total_tokens", "name", "key", "tokenizer"] {
            assert_eq!(KeyHint::of_key(key), KeyHint::None, "{key}");
        }
        assert_eq!(KeyHint::of_key("phone"), KeyHint::Phone);
        assert_eq!(KeyHint::of_key("home_phone"), KeyHint::Phone);
        assert_eq!(KeyHint::of_key("phones"), KeyHint::Phone);
        assert_eq!(KeyHint::of_key("customer_ssn"), KeyHint::Ssn);
        assert_eq!(KeyHint::of_key("card_number"), KeyHint::Card);
        assert_eq!(KeyHint::of_key("order_number"), KeyHint::None);
    }

    #[test]
    fn keys_naming_a_secret_and_keys_describing_one() {
        for key in [
            "secret",
            "token",
            "private_key",
            "SIGNING_KEY",
            "Proxy-Authorization",
            "Set-Cookie",
            "aws_secret_access_key",
        ] {
            assert_eq!(KeyHint::of_key(key), KeyHint::Secret, "{key}");
        }
        for key in ["password_hint", "token_type", "secret_name", "is_secret", "hasPassword", "payment_authorization"] {
            assert_eq!(KeyHint::of_key(key), KeyHint::None, "{key}");
        }
        // A secret's name followed by qualifiers still names it; one followed by a describing word does not.
        for key in [
            "password_new",
            "password_old",
            "passwordConfirm",
            "DB_PASSWORD_PROD",
            "SECRET_KEY_BASE",
            "GITHUB_TOKEN_2",
            "secret_1",
            "password0",
            "api_key_v2",
            "client_secret_prod",
            "token_dev_2",
            "DB_PASSWORD_PROD_2_OLD",
            "password_hash",
            "stripe_secret_key_prod",
        ] {
            assert_eq!(KeyHint::of_key(key), KeyHint::Secret, "{key}");
            assert_eq!(KeyHint::of_member(key), KeyHint::Secret, "{key}");
        }
        for key in [
            "api_key_id",
            "token_file",
            "token_expiry",
            "secret_version",
            "password_updated_at",
            "next_page_token_2",
            "max_tokens_2",
            "pin1",
            "line2",
            "v2",
            "base64",
            "contest",
            "database",
            "tokenizer_dev",
            "password_hint_old",
            "token_type_2",
        ] {
            assert_eq!(KeyHint::of_key(key), KeyHint::None, "{key}");
            assert_eq!(KeyHint::of_member(key), KeyHint::None, "{key}");
        }
        // Longer than any key worth reading: no hint, no panic.
        assert_eq!(KeyHint::of_key(&"a".repeat(10_000)), KeyHint::None);
        assert_eq!(KeyHint::of_key(&format!("{}password", "é".repeat(100))), KeyHint::Secret);
    }

    #[test]
    fn masker_output_names_nothing() {
        for masked in ["[GITHUB_TOKEN]", "[SECRET_VALUE]#2", "[API_TOKEN:3f2a9c1b]", "sk-proj-...DNxS", "j***@x.io#3"] {
            assert_eq!(KeyHint::of_member(masked), KeyHint::None, "{masked}");
        }
        assert_eq!(KeyHint::of_member("db#password"), KeyHint::Secret);
        assert_eq!(KeyHint::of_member("[db] password"), KeyHint::Secret);
        let masked_name = json!({"name": "[GITHUB_TOKEN]", "value": "alerts"});
        assert_eq!(pair_hint(masked_name.as_object().unwrap()), KeyHint::None);
    }

    #[test]
    fn name_value_pairs() {
        let hint = |value: serde_json::Value| pair_hint(value.as_object().unwrap());
        assert_eq!(hint(json!({"name": "DB_PASSWORD", "value": "x"})), KeyHint::Secret);
        assert_eq!(hint(json!({"Key": "api_key", "Value": "x"})), KeyHint::Secret);
        assert_eq!(hint(json!({"ParameterKey": "DbPassword", "ParameterValue": "x"})), KeyHint::Secret);
        assert_eq!(hint(json!({"Name": "/prod/db/password", "Type": "SecureString", "Value": "x"})), KeyHint::Secret);
        assert_eq!(hint(json!({"name": "support_phone", "value": "x"})), KeyHint::Phone);
        assert_eq!(hint(json!({"name": "token_count", "value": 12})), KeyHint::None);
        assert_eq!(hint(json!({"name": "password_hint", "value": "pet"})), KeyHint::None);
        // No value member, or a name that is not a string: nothing is marked.
        assert_eq!(hint(json!({"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {}}})), KeyHint::None);
        assert_eq!(hint(json!({"name": ["password"], "value": "x"})), KeyHint::None);
        assert_eq!(hint(json!({"label": "password", "value": "x"})), KeyHint::None);
    }
}
