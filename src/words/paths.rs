//! Paths and URLs a BMC hands out (members, `nextLink`s, redirects, `@odata.id`s, reset targets), checked
//! the way a server reads them: segment by segment, after percent-decoding. A check on the encoded text
//! would take `1%2f..%2f2` for one segment below `Systems`; a server that decodes it resets `Systems/2`.

use std::borrow::Cow;

use percent_encoding::percent_decode_str;
use url::Url;

use super::power::bounded;

/// The longest BMC-supplied path coroner uses; Redfish URIs are far shorter.
pub const MAX_PATH_CHARS: usize = 512;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathProblem {
    #[error("it is longer than {MAX_PATH_CHARS} characters")]
    TooLong,
    #[error("it is not a URL reference ({0})")]
    Invalid(String),
    #[error("it points to another origin ({0})")]
    OtherOrigin(String),
    #[error("it carries credentials (user@host)")]
    Userinfo,
    #[error("its segment {0:?} decodes to a separator, a dot segment, a control character or invalid UTF-8")]
    Segment(String),
    #[error("it has an empty segment")]
    EmptySegment,
}

/// `reference` (absolute URL, `//host/…` or a path) resolved against `base`, accepted only if it stays
/// on `base`'s origin, carries no credentials and every segment of its path is usable
/// ([`segments`]). Dot segments (`..`, `%2e%2e`, `\..\`) are resolved here, as the URL standard and
/// every server do, before the checks run.
pub fn resolve(base: &Url, reference: &str) -> Result<Url, PathProblem> {
    if reference.chars().count() > MAX_PATH_CHARS {
        return Err(PathProblem::TooLong);
    }
    let url = base.join(reference).map_err(|e| PathProblem::Invalid(e.to_string()))?;
    if url.origin() != base.origin() {
        return Err(PathProblem::OtherOrigin(bounded(&url.origin().ascii_serialization(), 256)));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(PathProblem::Userinfo);
    }
    segments(url.path())?;
    Ok(url)
}

/// The decoded segments of an absolute path, refused if one decodes to something a server could read
/// as structure: `/`, `\` or `%` inside a segment, `.` or `..`, a control character, invalid UTF-8, or
/// an empty segment other than a trailing slash (which is dropped).
pub fn segments(path: &str) -> Result<Vec<String>, PathProblem> {
    let raw: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    let last = raw.len() - 1;
    let mut decoded = Vec::with_capacity(raw.len());
    for (i, segment) in raw.iter().enumerate() {
        if segment.is_empty() {
            if i == last {
                break;
            }
            return Err(PathProblem::EmptySegment);
        }
        let text = percent_decode_str(segment).decode_utf8().map_err(|_| PathProblem::Segment(bounded(segment, 64)))?;
        // A `%` left after decoding is a second layer of encoding, which only a server that decodes
        // twice would read, and then as anything at all.
        if text == "." || text == ".." || text.chars().any(|c| matches!(c, '/' | '\\' | '%') || c.is_control()) {
            return Err(PathProblem::Segment(bounded(segment, 64)));
        }
        decoded.push(text.into_owned());
    }
    Ok(decoded)
}

/// Whether `target` lies strictly below `system`, compared on decoded segments: `Systems/1/../2/…`,
/// `Systems/1%2f..%2f2/…` and `Systems/10/…` are not below `Systems/1`. Unusable paths are below
/// nothing.
pub fn below(system: &str, target: &str) -> bool {
    match (segments(system), segments(target)) {
        (Ok(system), Ok(target)) => target.len() > system.len() && target.starts_with(&system),
        _ => false,
    }
}

/// Whether two paths name the same resource (decoded segments, a trailing slash ignored).
pub fn same_resource(a: &str, b: &str) -> bool {
    matches!((segments(a), segments(b)), (Ok(a), Ok(b)) if a == b)
}

/// `text` (a URL, or what was meant as one) without its userinfo, for every message that echoes an
/// endpoint: whatever stands between `scheme://` and the last `@` of the authority is dropped.
pub fn without_userinfo(text: &str) -> Cow<'_, str> {
    let start = text.find("://").map_or(0, |i| i + 3);
    let rest = &text[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => Cow::Owned(format!("{}{}", &text[..start], &rest[at + 1..])),
        None => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Url {
        Url::parse("https://10.0.0.1:8443/redfish/v1").unwrap()
    }

    #[test]
    fn a_path_on_the_same_origin_resolves() {
        for (reference, path) in [
            ("/redfish/v1/Systems/1", "/redfish/v1/Systems/1"),
            ("https://10.0.0.1:8443/redfish/v1/Systems/1", "/redfish/v1/Systems/1"),
            ("/redfish/v1/Systems/1/../2", "/redfish/v1/Systems/2"),
            ("/redfish/v1/Systems/1/%2e%2e/2", "/redfish/v1/Systems/2"),
            ("/redfish/v1/Systems/1\\..\\2", "/redfish/v1/Systems/2"),
            ("/redfish/v1/Systems/1/", "/redfish/v1/Systems/1/"),
        ] {
            assert_eq!(resolve(&base(), reference).map(|u| u.path().to_owned()), Ok(path.to_owned()), "{reference}");
        }
    }

    #[test]
    fn another_origin_or_credentials_are_refused() {
        for reference in [
            "https://other:8443/redfish/v1/Systems/1",
            "//other/redfish/v1",
            "http://10.0.0.1:8443/redfish/v1",
            "https://10.0.0.1:9443/x",
            "https://10.0.0.1:8443@evil/redfish/v1",
        ] {
            assert!(matches!(resolve(&base(), reference), Err(PathProblem::OtherOrigin(_))), "{reference}");
        }
        assert_eq!(resolve(&base(), "https://admin:pw@10.0.0.1:8443/redfish/v1"), Err(PathProblem::Userinfo));
    }

    #[test]
    fn a_segment_that_decodes_to_structure_is_refused() {
        for reference in [
            "/redfish/v1/Systems/1%2f..%2f2",
            "/redfish/v1/Systems/1%2F2",
            "/redfish/v1/Systems/1%5c..%5c2",
            "/redfish/v1/Systems/1%00",
            "/redfish/v1/Systems/1%1b[31m",
            "/redfish/v1/Systems/%ff",
            "/redfish/v1/Systems/%252e%252e",
            "/redfish/v1//Systems/1",
        ] {
            assert!(resolve(&base(), reference).is_err(), "{reference}");
        }
    }

    #[test]
    fn an_overlong_reference_is_refused() {
        let long = format!("/redfish/v1/Systems/{}", "a".repeat(MAX_PATH_CHARS));
        assert_eq!(resolve(&base(), &long), Err(PathProblem::TooLong));
    }

    #[test]
    fn below_compares_decoded_segments_strictly() {
        let system = "/redfish/v1/Systems/1";
        for target in ["/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", "/redfish/v1/Systems/%31/Actions/Reset"] {
            assert!(below(system, target), "{target}");
        }
        for target in [
            "/redfish/v1/Systems/2/Actions/ComputerSystem.Reset",
            "/redfish/v1/Systems/10/Actions/ComputerSystem.Reset",
            "/redfish/v1/Systems/1",
            "/redfish/v1/Systems/1/",
            "/redfish/v1/Systems/1/%2e%2e/2/Actions",
            "/redfish/v1/Systems/1%2f..%2f2/Actions",
            "/redfish/v1/Systems",
        ] {
            assert!(!below(system, target), "{target}");
        }
    }

    #[test]
    fn the_same_resource_ignores_a_trailing_slash_and_encoding() {
        assert!(same_resource("/redfish/v1/Systems/1", "/redfish/v1/Systems/1/"));
        assert!(same_resource("/redfish/v1/Systems/1", "/redfish/v1/Systems/%31"));
        assert!(!same_resource("/redfish/v1/Systems/1", "/redfish/v1/Systems/2"));
    }

    #[test]
    fn userinfo_is_stripped_from_anything_echoed() {
        for (text, shown) in [
            ("https://admin:s3cret@10.0.0.1/redfish/v1", "https://10.0.0.1/redfish/v1"),
            ("https://a@b:s3cret@10.0.0.1:99", "https://10.0.0.1:99"),
            ("admin:s3cret@bmc", "bmc"),
            ("http://admin:s3cret@host:notaport/x?y@z", "http://host:notaport/x?y@z"),
            ("https://10.0.0.1/path@not-userinfo", "https://10.0.0.1/path@not-userinfo"),
        ] {
            assert_eq!(without_userinfo(text), shown, "{text}");
        }
    }

    // Properties ---------------------------------------------------------------------------------------

    use proptest::prelude::*;

    /// How the most lenient server reads a path: every percent escape decoded (repeatedly), `\` taken
    /// for `/`, empty segments collapsed, dot segments resolved.
    fn lenient_server(path: &str) -> String {
        let mut text = path.to_owned();
        loop {
            let decoded = percent_decode_str(&text).decode_utf8_lossy().into_owned();
            if decoded == text {
                break;
            }
            text = decoded;
        }
        let mut resolved: Vec<&str> = Vec::new();
        for segment in text.split(['/', '\\']) {
            match segment {
                "" | "." => {}
                ".." => {
                    resolved.pop();
                }
                other => resolved.push(other),
            }
        }
        format!("/{}", resolved.join("/"))
    }

    fn reference() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "/",
            "..",
            ".",
            "%2f",
            "%2F",
            "%5c",
            "\\",
            "%2e",
            "%2E%2e",
            "%252e",
            "%25",
            "2",
            "1",
            "Actions",
            "Reset",
            "?",
            "#",
            "%00",
            "@",
            ":",
            ";",
            "%3f",
            "//other",
            "https://other",
            "https://10.0.0.1:8443",
            "u:p@",
        ]);
        let start =
            prop::sample::select(vec!["", "/redfish/v1/Systems/1/", "/redfish/v1/Systems/1", "https://10.0.0.1:8443/"]);
        (start, prop::collection::vec(piece, 0..10)).prop_map(|(start, pieces)| format!("{start}{}", pieces.concat()))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn a_target_accepted_below_a_system_never_resolves_outside_it(reference in reference()) {
            let system = "/redfish/v1/Systems/1";
            if let Ok(url) = resolve(&base(), &reference)
                && below(system, url.path())
            {
                let seen = lenient_server(url.path());
                prop_assert!(seen.starts_with("/redfish/v1/Systems/1/"), "{:?} → {} → {}", reference, url.path(), seen);
            }
        }

        #[test]
        fn a_url_accepted_as_same_origin_is_same_origin(reference in reference()) {
            if let Ok(url) = resolve(&base(), &reference) {
                prop_assert_eq!(url.origin(), base().origin());
                prop_assert!(url.username().is_empty() && url.password().is_none());
                let again = Url::parse(url.as_str()).unwrap();
                prop_assert_eq!(again.origin(), base().origin());
                prop_assert!(url.as_str().starts_with("https://10.0.0.1:8443/"));
            }
        }

        #[test]
        fn segments_never_panic_and_accepted_ones_carry_no_structure(path in ".{0,40}") {
            if let Ok(segments) = segments(&path) {
                for segment in segments {
                    prop_assert!(!segment.is_empty() && segment != "." && segment != "..");
                    prop_assert!(!segment.contains(['/', '\\', '%']) && !segment.chars().any(char::is_control));
                }
            }
        }

        #[test]
        fn userinfo_never_survives(user in "[a-z]{1,8}", password in "[a-zA-Z0-9@:]{1,12}", host in "[a-z0-9.]{1,12}", tail in "(/[a-z@]{0,6}){0,3}") {
            let text = format!("https://{user}:{password}@{host}{tail}");
            let shown = without_userinfo(&text);
            prop_assert_eq!(shown.as_ref(), format!("https://{host}{tail}"));
        }
    }
}
