//! The house on floors (src/lib.rs's map): a module imports only from its own floor or below, device
//! clients and rules stand beside each other without importing each other, the pure floors use no
//! clock, runtime, HTTP client or API handle, and no two rooms (a top-level module, its folder
//! included) import each other round a circle outside the simulator.
//!
//! Reads src/ with `syn`: every `crate::`, `super::` and `self::` path (in `use` trees, types,
//! expressions, patterns and macro bodies) is resolved to the module that defines what it names,
//! following `pub use` re-exports; comments and doc links are not code and are not read. Code
//! compiled for tests only (`#[cfg(test)]`) is not part of the house and is skipped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// One floor of the map: its rank (lowest 1), its name, whether it must stay free of I/O, and the
/// module paths (below `crate`) that live on it.
#[derive(Debug)]
struct Floor {
    rank: u32,
    name: String,
    pure: bool,
    modules: Vec<String>,
}

/// The map in src/lib.rs's doc: lines `//! N. name (pure): [`a`], [`b::c`], ...` after the `## Floors`
/// heading, up to the next heading.
fn floors(lib: &str) -> Vec<Floor> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in lib.lines() {
        let Some(doc) = line.strip_prefix("//!") else { continue };
        let doc = doc.trim();
        if doc == "## Floors" {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if doc.starts_with("## ") {
            break;
        }
        let Some((rank, rest)) = doc.split_once(". ") else { continue };
        let Ok(rank) = rank.parse() else { continue };
        let (head, list) = rest.split_once(':').unwrap_or_else(|| panic!("a floor line without ':' in lib.rs: {doc}"));
        let pure = head.contains("(pure)");
        let name = head.replace("(pure)", "").trim().to_string();
        // Each item's first code span names the module: [`fence`], or `sim` (the `sim` feature).
        let modules = list.split(',').filter_map(|item| Some(item.split('`').nth(1)?.to_string())).collect();
        out.push(Floor { rank, name, pure, modules });
    }
    assert!(!out.is_empty(), "src/lib.rs's doc has no `## Floors` map");
    out
}

/// A module path below `crate`, e.g. `["fence", "observe"]`.
type Module = Vec<String>;

fn join(m: &[String]) -> String {
    if m.is_empty() { "crate".into() } else { m.join("::") }
}

/// What one file tells: its module, the modules it declares (inline ones included), its `pub use`
/// re-exports, and the crate paths it uses with their lines.
#[derive(Default)]
struct Facts {
    modules: BTreeSet<Module>,
    /// (module, name) → the absolute path it re-exports; a glob re-export is keyed by `*`.
    reexports: BTreeMap<(Module, String), Vec<Vec<String>>>,
    /// (file, line, using module, absolute path used)
    uses: Vec<(PathBuf, usize, Module, Vec<String>)>,
    /// (file, line, what) for clocks, runtimes, HTTP clients and API handles.
    io: Vec<(PathBuf, usize, Module, String)>,
    /// Files that a `#[cfg(test)] mod x;` declares: not part of the house.
    test_files: BTreeSet<Module>,
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let tokens = a.meta.require_list().map(|l| l.tokens.to_string()).unwrap_or_default();
            tokens == "test" || tokens.starts_with("all (test")
        }
    })
}

struct Reader<'a> {
    facts: &'a mut Facts,
    file: PathBuf,
    module: Module,
}

impl Reader<'_> {
    /// `path` as written in `self.module`, made absolute (below `crate`); None for paths that do
    /// not start at `crate`, `super` or `self` (locals, imports already counted, other crates).
    fn absolute(&self, segments: &[String]) -> Option<Vec<String>> {
        let mut base = self.module.clone();
        let mut rest = segments;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            _ => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn record(&mut self, line: usize, segments: Vec<String>) {
        if let Some(path) = self.absolute(&segments) {
            self.facts.uses.push((self.file.clone(), line, self.module.clone(), path));
        }
    }

    fn io(&mut self, line: usize, what: &str) {
        self.facts.io.push((self.file.clone(), line, self.module.clone(), what.to_string()));
    }

    /// Flattens a `use` tree into its paths (a glob ends in `*`).
    fn tree(prefix: &mut Vec<String>, tree: &syn::UseTree, out: &mut Vec<(Vec<String>, Option<String>)>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                Self::tree(prefix, &p.tree, out);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut path = prefix.clone();
                if n.ident != "self" {
                    path.push(n.ident.to_string());
                }
                let name = path.last().cloned();
                out.push((path, name));
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                path.push(r.ident.to_string());
                out.push((path, Some(r.rename.to_string())));
            }
            syn::UseTree::Glob(_) => {
                let mut path = prefix.clone();
                path.push("*".into());
                out.push((path, Some("*".into())));
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    Self::tree(prefix, t, out);
                }
            }
        }
    }

    /// Paths in a macro's tokens: `crate :: a :: b`, `super :: x`, and the I/O names.
    fn tokens(&mut self, tokens: TokenStream) {
        let flat: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < flat.len() {
            match &flat[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) => {
                    // The run `a :: b :: c` that starts here.
                    let mut segments = vec![id.to_string()];
                    let mut j = i + 1;
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(TokenTree::Ident(next))) =
                        (flat.get(j), flat.get(j + 1), flat.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segments.push(next.to_string());
                        j += 3;
                    }
                    let line = id.span().start().line;
                    if ["crate", "super", "self"].contains(&segments[0].as_str()) {
                        if segments.len() > 1 {
                            self.record(line, segments);
                        }
                    } else if let Some(what) = io_name(&segments) {
                        self.io(line, &what);
                    }
                    i = j;
                    continue;
                }
                TokenTree::Punct(_) | TokenTree::Literal(_) => {}
            }
            i += 1;
        }
    }
}

/// Whether a path (its segments) names a clock, a runtime, an HTTP client or an API handle.
fn io_name(segments: &[String]) -> Option<String> {
    if let Some(first @ ("tokio" | "reqwest")) = segments.first().map(String::as_str) {
        return Some(format!("{first}::"));
    }
    segments.windows(2).find_map(|w| match (w[0].as_str(), w[1].as_str()) {
        (clock @ ("Timestamp" | "Instant" | "SystemTime"), "now") => Some(format!("{clock}::now")),
        ("kube", "Api") => Some("kube::Api".into()),
        _ => None,
    })
}

fn line_of(span: proc_macro2::Span) -> usize {
    span.start().line
}

impl<'ast> Visit<'ast> for Reader<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let mut child = self.module.clone();
        child.push(m.ident.to_string());
        if is_cfg_test(&m.attrs) {
            self.facts.test_files.insert(child);
            return;
        }
        self.facts.modules.insert(child.clone());
        if let Some((_, items)) = &m.content {
            let outer = std::mem::replace(&mut self.module, child);
            for item in items {
                self.visit_item(item);
            }
            self.module = outer;
        }
    }

    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match item {
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(_) => &[],
            _ => &[],
        };
        if is_cfg_test(attrs) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_cfg_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut paths = Vec::new();
        Reader::tree(&mut Vec::new(), &u.tree, &mut paths);
        let line = line_of(u.use_token.span);
        let public = !matches!(u.vis, syn::Visibility::Inherited);
        for (path, name) in paths {
            if let Some(what) = io_name(&path) {
                self.io(line, &what);
            }
            let Some(absolute) = self.absolute(&path) else { continue };
            if public && let Some(name) = name {
                let target = if name == "*" { absolute[..absolute.len() - 1].to_vec() } else { absolute.clone() };
                self.facts.reexports.entry((self.module.clone(), name)).or_default().push(target);
            }
            let used = if absolute.last().map(String::as_str) == Some("*") {
                absolute[..absolute.len() - 1].to_vec()
            } else {
                absolute
            };
            self.facts.uses.push((self.file.clone(), line, self.module.clone(), used));
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(first) = segments.first() {
            let line = line_of(p.segments[0].ident.span());
            if ["crate", "super", "self"].contains(&first.as_str()) && segments.len() > 1 {
                self.record(line, segments.clone());
            } else if let Some(what) = io_name(&segments) {
                self.io(line, &what);
            }
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

/// Every file of src/ but main.rs (the binary: wiring by definition) and its module.
fn files(src: &Path) -> Vec<(PathBuf, Module)> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src/");
            let mut module: Module =
                relative.with_extension("").iter().map(|s| s.to_string_lossy().into_owned()).collect();
            match module.last().map(String::as_str) {
                Some("main") if module.len() == 1 => continue,
                Some("lib") if module.len() == 1 => module.clear(),
                Some("mod") => {
                    module.pop();
                }
                _ => {}
            }
            out.push((path, module));
        }
    }
    out.sort();
    out
}

struct House {
    facts: Facts,
}

impl House {
    fn read(src: &Path) -> House {
        let mut facts = Facts::default();
        let all = files(src);
        for (_, module) in &all {
            facts.modules.insert(module.clone());
        }
        for (path, module) in &all {
            let text = std::fs::read_to_string(path).expect("a source file");
            let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let mut reader = Reader { facts: &mut facts, file: path.clone(), module: module.clone() };
            reader.visit_file(&file);
        }
        // A file under a module declared for tests only is not part of the house either.
        let tests: Vec<Module> = facts.test_files.iter().cloned().collect();
        let under = |m: &Module| tests.iter().any(|t| m.starts_with(t));
        facts.uses.retain(|(_, _, m, _)| !under(m));
        facts.io.retain(|(_, _, m, _)| !under(m));
        House { facts }
    }

    /// The module that defines what `path` names: its longest module prefix, then through the
    /// re-exports of that module for the next name.
    fn defining(&self, path: &[String], depth: usize) -> Module {
        let mut len = path.len();
        while len > 0 && !self.facts.modules.contains(&path[..len]) {
            len -= 1;
        }
        let module = path[..len].to_vec();
        if depth > 8 || len == path.len() {
            return module;
        }
        let name = &path[len];
        if let Some(targets) = self.facts.reexports.get(&(module.clone(), name.clone())) {
            let mut target = targets[0].clone();
            target.extend(path[len + 1..].iter().cloned());
            return self.defining(&target, depth + 1);
        }
        if let Some(glob) = self.facts.reexports.get(&(module.clone(), "*".into())).and_then(|g| g.first()) {
            let mut target = glob.clone();
            target.extend(path[len..].iter().cloned());
            return self.defining(&target, depth + 1);
        }
        module
    }
}

fn floor_of<'a>(floors: &'a [Floor], module: &[String]) -> Option<&'a Floor> {
    let mut best: Option<(&Floor, usize)> = None;
    for floor in floors {
        for m in &floor.modules {
            let parts: Vec<&str> = m.split("::").collect();
            if module.len() >= parts.len()
                && module.iter().zip(&parts).all(|(a, b)| a == b)
                && best.is_none_or(|(_, n)| parts.len() > n)
            {
                best = Some((floor, parts.len()));
            }
        }
    }
    best.map(|(f, _)| f)
}

#[test]
fn every_module_imports_only_from_its_own_floor_or_below() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("src/lib.rs");
    let floors = floors(&lib);
    let house = House::read(&root.join("src"));
    let mut problems = BTreeSet::new();
    let mut edges: BTreeMap<String, BTreeMap<String, (PathBuf, usize)>> = BTreeMap::new();
    for (file, line, from, path) in &house.facts.uses {
        let to = house.defining(path, 0);
        if from.is_empty() || to.is_empty() || from[0] == to[0] {
            continue;
        }
        let file_name = file.strip_prefix(root).unwrap_or(file).display().to_string();
        edges.entry(from[0].clone()).or_default().entry(to[0].clone()).or_insert((file.clone(), *line));
        let (Some(a), Some(b)) = (floor_of(&floors, from), floor_of(&floors, &to)) else {
            let missing = if floor_of(&floors, from).is_none() { from } else { &to };
            problems.insert(format!("{file_name}:{line}: `{}` is on no floor of src/lib.rs's map", join(missing)));
            continue;
        };
        let upward = b.rank > a.rank;
        let beside = b.rank == a.rank && b.name != a.name;
        if upward || beside {
            let how = if upward { "a higher floor" } else { "the floor beside it" };
            problems.insert(format!(
                "{file_name}:{line}: `{}` ({} {}) imports `{}` from {how} ({} {})",
                join(from),
                a.rank,
                a.name,
                join(path),
                b.rank,
                b.name
            ));
        }
    }
    for (file, line, module, what) in &house.facts.io {
        if floor_of(&floors, module).is_some_and(|f| f.pure) {
            let file_name = file.strip_prefix(root).unwrap_or(file).display().to_string();
            problems.insert(format!("{file_name}:{line}: `{}` is on a pure floor and uses {what}", join(module)));
        }
    }
    for circle in circles(&edges) {
        let shown: Vec<String> = circle
            .windows(2)
            .map(|w| {
                let (file, line) = &edges[&w[0]][&w[1]];
                format!("{} → {} ({}:{line})", w[0], w[1], file.strip_prefix(root).unwrap_or(file).display())
            })
            .collect();
        problems.insert(format!("a circle: {}", shown.join(", ")));
    }
    assert!(
        problems.is_empty(),
        "{} problems with the floors:\n{}",
        problems.len(),
        problems.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// Circles between rooms outside the simulator: one shortest circle through each room that is on one.
fn circles(edges: &BTreeMap<String, BTreeMap<String, (PathBuf, usize)>>) -> Vec<Vec<String>> {
    let exempt = |room: &str| room == "sim";
    let mut found: Vec<Vec<String>> = Vec::new();
    for start in edges.keys().filter(|r| !exempt(r)) {
        // Breadth first from `start` back to itself.
        let mut came: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        let mut closed = None;
        while let Some(room) = queue.pop_front() {
            for next in edges.get(&room).into_iter().flat_map(|e| e.keys()).filter(|r| !exempt(r)) {
                if next == start {
                    closed = Some(room.clone());
                    break;
                }
                if !came.contains_key(next) {
                    came.insert(next.clone(), room.clone());
                    queue.push_back(next.clone());
                }
            }
            if closed.is_some() {
                break;
            }
        }
        let Some(last) = closed else { continue };
        let mut path = vec![last.clone()];
        let mut at = last;
        while at != *start {
            at = came[&at].clone();
            path.push(at.clone());
        }
        path.reverse();
        path.push(start.clone());
        let mut key = path[..path.len() - 1].to_vec();
        key.sort();
        if !found.iter().any(|c| {
            let mut k = c[..c.len() - 1].to_vec();
            k.sort();
            k == key
        }) {
            found.push(path);
        }
    }
    found
}
