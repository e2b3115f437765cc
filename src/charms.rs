//! Loading charms from disk: the edge between a `deploy` argument and a
//! [`Charm`].
//!
//! A local charm is a directory in Juju's layout: `metadata.yaml`
//! (required), `config.yaml` (optional: a charm without one has no
//! options) and `revision` (optional: the revision number, 0 without it),
//! besides whatever else the charm ships. [`load_charm_dir`] reads and
//! parses those files and computes the sha256 the store keeps with the
//! charm; [`resolve`] decides whether a `deploy` argument is a directory or
//! the name of a charm.
//!
//! A charm also travels as a zip archive of its directory (`berth deploy
//! ./dir` packs it with [`pack_charm_dir`] and `POST /v1/charms` reads it
//! with [`load_charm_archive`]): the same rules, strict about paths and
//! sizes, and the same sha256 as the directory it was made from.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::domain::charm::{Charm, CharmConfig, CharmError, CharmMeta, Namespace, ParsedCharm};
use crate::domain::names::ApplicationName;

/// The charm's metadata, which every charm directory has.
pub const METADATA_FILE: &str = "metadata.yaml";
/// The charm's config options, which a charm directory may have.
pub const CONFIG_FILE: &str = "config.yaml";
/// The charm's revision (Juju's legacy layout), which a charm directory may
/// have.
pub const REVISION_FILE: &str = "revision";

/// Why a charm could not be loaded. Every message names the file or
/// argument and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum CharmLoadError {
    #[error("cannot open charm directory {}: {source}", .path.display())]
    NoDirectory {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} is not a directory: a local charm is a directory holding {METADATA_FILE}", .path.display())]
    NotADirectory { path: PathBuf },
    /// `path` is where metadata.yaml should be.
    #[error("{} not found: a charm directory must hold {METADATA_FILE}", .path.display())]
    MissingMetadata { path: PathBuf },
    #[error("cannot read {}: {source}", .path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file was read but its content breaks the charm rules (or is not
    /// YAML: the message then gives the line).
    #[error("{}: {source}", .path.display())]
    Invalid {
        path: PathBuf,
        #[source]
        source: CharmError,
    },
    #[error("{}: expected a revision number, got {content:?}", .path.display())]
    BadRevision { path: PathBuf, content: String },
    /// `metadata.yaml`, `config.yaml` or `revision` is a symbolic link: an
    /// archive carries a link as a link, not as the charm's file, so the
    /// directory would load differently once uploaded.
    #[error("{} is a symbolic link: a charm's own files must be regular files", .path.display())]
    LinkedCharmFile { path: PathBuf },
    #[error(
        "{0:?} is not a valid charm name: expected a charm name (such as wordpress) or a path to a charm directory (such as ./wordpress)"
    )]
    InvalidName(String),
    #[error("not a charm archive: {0}; expected a zip archive of a charm directory")]
    NotAnArchive(String),
    #[error(
        "charm archive entry {0:?} escapes the charm's root: entries must be relative paths without '..'"
    )]
    UnsafePath(String),
    #[error("charm archive has no {METADATA_FILE} at its root: a charm must have one")]
    ArchiveWithoutMetadata,
    #[error("charm archive too large: {0}")]
    ArchiveTooLarge(String),
}

/// Reads the text of the charm's own file `path`, or `None` if there is no
/// such file. A symbolic link is refused, not followed: packed, it would
/// travel as a link and the archive would load without it.
fn read_optional(path: &Path) -> Result<Option<String>, CharmLoadError> {
    if fs::symlink_metadata(path).is_ok_and(|info| info.file_type().is_symlink()) {
        return Err(CharmLoadError::LinkedCharmFile {
            path: path.to_path_buf(),
        });
    }
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CharmLoadError::Unreadable {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Loads the charm in directory `dir` as `local:<name>-<revision>`.
///
/// # Guarantees
///
/// The sha256 covers every regular file and symbolic link under `dir`
/// (links are not followed; their targets are hashed as text), taken in
/// order of their relative paths, each as its path and its bytes with
/// their lengths. So it does not depend on the order the file system lists
/// entries in, changes with any edit, rename or added file, and is the
/// same for the same contents wherever the directory is. Empty directories
/// do not count.
///
/// # Errors
///
/// - [`CharmLoadError::NoDirectory`] / [`CharmLoadError::NotADirectory`]
///   when `dir` cannot be opened or is not a directory;
/// - [`CharmLoadError::MissingMetadata`] without `metadata.yaml`;
/// - [`CharmLoadError::LinkedCharmFile`] when `metadata.yaml`,
///   `config.yaml` or `revision` is a symbolic link;
/// - [`CharmLoadError::Unreadable`] for a file that cannot be read (or is
///   not UTF-8, for the charm's YAML files);
/// - [`CharmLoadError::Invalid`], naming the file, for metadata or config
///   that is not YAML or breaks the charm rules;
/// - [`CharmLoadError::BadRevision`] for a `revision` file that does not
///   hold a number.
pub fn load_charm_dir(dir: &Path) -> Result<ParsedCharm, CharmLoadError> {
    let info = fs::metadata(dir).map_err(|source| CharmLoadError::NoDirectory {
        path: dir.to_path_buf(),
        source,
    })?;
    if !info.is_dir() {
        return Err(CharmLoadError::NotADirectory {
            path: dir.to_path_buf(),
        });
    }

    let metadata_path = dir.join(METADATA_FILE);
    let metadata =
        read_optional(&metadata_path)?.ok_or_else(|| CharmLoadError::MissingMetadata {
            path: metadata_path.clone(),
        })?;
    let meta = CharmMeta::parse_yaml(&metadata).map_err(|source| CharmLoadError::Invalid {
        path: metadata_path,
        source,
    })?;

    let config_path = dir.join(CONFIG_FILE);
    let config = match read_optional(&config_path)? {
        None => CharmConfig::default(),
        Some(text) => CharmConfig::parse_yaml(&text).map_err(|source| CharmLoadError::Invalid {
            path: config_path,
            source,
        })?,
    };

    let revision_path = dir.join(REVISION_FILE);
    let revision = match read_optional(&revision_path)? {
        None => 0,
        Some(text) => text
            .trim()
            .parse::<u32>()
            .map_err(|_| CharmLoadError::BadRevision {
                path: revision_path,
                content: text,
            })?,
    };

    let sha256 = digest_dir(dir)?;
    Ok(ParsedCharm {
        charm: Charm::new(Namespace::Local, revision, meta, config),
        sha256,
    })
}

/// One entry of a charm directory, as hashed.
enum Entry {
    File(PathBuf),
    Link(PathBuf),
}

/// Collects the files and links under `dir`, keyed by their path relative
/// to the charm's root as bytes with `/` between components.
fn collect(
    dir: &Path,
    relative: &[u8],
    out: &mut Vec<(Vec<u8>, Entry)>,
) -> Result<(), CharmLoadError> {
    let unreadable = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CharmLoadError::Unreadable { path, source }
    };
    for entry in fs::read_dir(dir).map_err(unreadable(dir))? {
        let entry = entry.map_err(unreadable(dir))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(unreadable(&path))?;
        let mut name = relative.to_vec();
        if !name.is_empty() {
            name.push(b'/');
        }
        name.extend_from_slice(entry.file_name().as_encoded_bytes());
        if kind.is_dir() {
            collect(&path, &name, out)?;
        } else if kind.is_file() {
            out.push((name, Entry::File(path)));
        } else if kind.is_symlink() {
            out.push((name, Entry::Link(path)));
        }
    }
    Ok(())
}

/// Feeds one file (`kind` `file`) or symbolic link (`link`, its target
/// as `bytes`) to the charm's hash: the kind, then the relative path and
/// the bytes, each framed by its length.
fn hash_entry(hasher: &mut Sha256, kind: &[u8], name: &[u8], bytes: &[u8]) {
    hasher.update(kind);
    update_framed(hasher, name);
    update_framed(hasher, bytes);
}

/// Feeds `bytes` to the hash after their length, so that no two different
/// sequences of fields hash alike.
fn update_framed(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The sha256 of a charm directory; see [`load_charm_dir`].
fn digest_dir(dir: &Path) -> Result<String, CharmLoadError> {
    let mut entries = Vec::new();
    collect(dir, &[], &mut entries)?;
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut hasher = Sha256::new();
    for (name, entry) in entries {
        match entry {
            Entry::File(path) => {
                let bytes = fs::read(&path)
                    .map_err(|source| CharmLoadError::Unreadable { path, source })?;
                hash_entry(&mut hasher, b"file", &name, &bytes);
            }
            Entry::Link(path) => {
                let target = fs::read_link(&path)
                    .map_err(|source| CharmLoadError::Unreadable { path, source })?;
                hash_entry(
                    &mut hasher,
                    b"link",
                    &name,
                    target.as_os_str().as_encoded_bytes(),
                );
            }
        }
    }
    Ok(hex(&hasher.finalize()))
}

/// The largest charm archive `POST /v1/charms` takes.
pub const MAX_ARCHIVE_BYTES: usize = 16 * 1024 * 1024;
/// The most a charm archive may unpack to, all entries together.
pub const MAX_UNPACKED_BYTES: u64 = 32 * 1024 * 1024;
/// The most entries a charm archive may hold.
pub const MAX_ARCHIVE_ENTRIES: usize = 10_000;

/// One file or link of a charm archive, as read.
struct ArchiveEntry {
    name: String,
    link: bool,
    bytes: Vec<u8>,
}

/// Reads every entry of a zip archive, checking each path and the sizes.
fn read_archive(bytes: &[u8]) -> Result<Vec<ArchiveEntry>, CharmLoadError> {
    use std::io::Read as _;
    if bytes.len() > MAX_ARCHIVE_BYTES {
        return Err(CharmLoadError::ArchiveTooLarge(format!(
            "{} bytes, at most {MAX_ARCHIVE_BYTES}",
            bytes.len()
        )));
    }
    let mut archive = zip::ZipArchive::new(io::Cursor::new(bytes))
        .map_err(|e| CharmLoadError::NotAnArchive(e.to_string()))?;
    if archive.len() > MAX_ARCHIVE_ENTRIES {
        return Err(CharmLoadError::ArchiveTooLarge(format!(
            "{} entries, at most {MAX_ARCHIVE_ENTRIES}",
            archive.len()
        )));
    }
    let mut entries = Vec::with_capacity(archive.len());
    let mut unpacked = 0u64;
    for index in 0..archive.len() {
        let mut file = archive
            .by_index(index)
            .map_err(|e| CharmLoadError::NotAnArchive(e.to_string()))?;
        let raw_name = file.name().to_string();
        let escapes = file.enclosed_name().is_none()
            || raw_name.starts_with('/')
            || raw_name.contains('\\')
            || raw_name.split('/').any(|part| part == "..");
        if escapes {
            return Err(CharmLoadError::UnsafePath(raw_name));
        }
        if file.is_dir() {
            continue;
        }
        // Read no more than what is left of the budget, whatever the entry
        // says its size is.
        let budget = MAX_UNPACKED_BYTES - unpacked;
        let mut content = Vec::new();
        (&mut file)
            .take(budget + 1)
            .read_to_end(&mut content)
            .map_err(|e| CharmLoadError::NotAnArchive(format!("entry {raw_name:?}: {e}")))?;
        unpacked += content.len() as u64;
        if unpacked > MAX_UNPACKED_BYTES {
            return Err(CharmLoadError::ArchiveTooLarge(format!(
                "it unpacks to more than {MAX_UNPACKED_BYTES} bytes"
            )));
        }
        entries.push(ArchiveEntry {
            name: raw_name.trim_start_matches("./").to_string(),
            link: file.is_symlink(),
            bytes: content,
        });
    }
    Ok(entries)
}

/// Loads the charm in a zip archive of a charm directory (as `berth
/// deploy ./dir` sends it, or a `.charm` file), as `local:<name>-<revision>`,
/// with the rules of [`load_charm_dir`]: `metadata.yaml` at the archive's
/// root, optional `config.yaml` and `revision`.
///
/// # Guarantees
///
/// The sha256 is the one [`load_charm_dir`] gives the directory the
/// archive was made from: it covers the files and links by their paths
/// and contents, not the archive's own timestamps, order or compression.
///
/// # Errors
///
/// [`CharmLoadError::NotAnArchive`] for bytes that are not a zip archive;
/// [`CharmLoadError::UnsafePath`] for an absolute path or one with `..`;
/// [`CharmLoadError::ArchiveTooLarge`] beyond [`MAX_ARCHIVE_BYTES`],
/// [`MAX_ARCHIVE_ENTRIES`] or [`MAX_UNPACKED_BYTES`];
/// [`CharmLoadError::ArchiveWithoutMetadata`];
/// [`CharmLoadError::LinkedCharmFile`] for a link entry named
/// `metadata.yaml`, `config.yaml` or `revision`; and those of the charm's
/// files, as for a directory.
pub fn load_charm_archive(bytes: &[u8]) -> Result<ParsedCharm, CharmLoadError> {
    let mut entries = read_archive(bytes)?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let text = |name: &str| -> Result<Option<String>, CharmLoadError> {
        entries
            .iter()
            .find(|entry| entry.name == name)
            .map(|entry| {
                if entry.link {
                    return Err(CharmLoadError::LinkedCharmFile {
                        path: PathBuf::from(name),
                    });
                }
                String::from_utf8(entry.bytes.clone()).map_err(|e| CharmLoadError::Unreadable {
                    path: PathBuf::from(name),
                    source: io::Error::new(io::ErrorKind::InvalidData, e),
                })
            })
            .transpose()
    };
    let metadata = text(METADATA_FILE)?.ok_or(CharmLoadError::ArchiveWithoutMetadata)?;
    let meta = CharmMeta::parse_yaml(&metadata).map_err(|source| CharmLoadError::Invalid {
        path: PathBuf::from(METADATA_FILE),
        source,
    })?;
    let config = match text(CONFIG_FILE)? {
        None => CharmConfig::default(),
        Some(text) => CharmConfig::parse_yaml(&text).map_err(|source| CharmLoadError::Invalid {
            path: PathBuf::from(CONFIG_FILE),
            source,
        })?,
    };
    let revision = match text(REVISION_FILE)? {
        None => 0,
        Some(text) => text
            .trim()
            .parse::<u32>()
            .map_err(|_| CharmLoadError::BadRevision {
                path: PathBuf::from(REVISION_FILE),
                content: text,
            })?,
    };
    let mut hasher = Sha256::new();
    for entry in &entries {
        let kind: &[u8] = if entry.link { b"link" } else { b"file" };
        hash_entry(&mut hasher, kind, entry.name.as_bytes(), &entry.bytes);
    }
    Ok(ParsedCharm {
        charm: Charm::new(Namespace::Local, revision, meta, config),
        sha256: hex(&hasher.finalize()),
    })
}

/// A zip archive of the charm directory `dir`, for `POST /v1/charms`:
/// its files and symbolic links (not followed) by their relative paths,
/// in order. The charm is loaded first, so a directory that is not a charm
/// (or whose `metadata.yaml`, `config.yaml` or `revision` is a link, which
/// the archive would not load as the directory does) is refused here,
/// before anything is sent.
///
/// # Errors
///
/// Those of [`load_charm_dir`]; [`CharmLoadError::Unreadable`] for a file
/// that cannot be read or a path that is not UTF-8.
pub fn pack_charm_dir(dir: &Path) -> Result<Vec<u8>, CharmLoadError> {
    use std::io::Write as _;
    load_charm_dir(dir)?;
    let mut entries = Vec::new();
    collect(dir, &[], &mut entries)?;
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let failed = |path: &Path, e: &dyn std::fmt::Display| CharmLoadError::Unreadable {
        path: path.to_path_buf(),
        source: io::Error::other(e.to_string()),
    };
    let mut zip = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .unix_permissions(0o644);
    for (name, entry) in entries {
        let name_text = String::from_utf8(name).map_err(|e| failed(dir, &e))?;
        match entry {
            Entry::File(path) => {
                let bytes = fs::read(&path).map_err(|source| CharmLoadError::Unreadable {
                    path: path.clone(),
                    source,
                })?;
                zip.start_file(name_text, options)
                    .map_err(|e| failed(&path, &e))?;
                zip.write_all(&bytes).map_err(|e| failed(&path, &e))?;
            }
            Entry::Link(path) => {
                let target = fs::read_link(&path).map_err(|source| CharmLoadError::Unreadable {
                    path: path.clone(),
                    source,
                })?;
                let target = target
                    .to_str()
                    .ok_or_else(|| failed(&path, &"a link target that is not UTF-8"))?;
                zip.add_symlink(name_text, target, options)
                    .map_err(|e| failed(&path, &e))?;
            }
        }
    }
    let archive = zip.finish().map_err(|e| failed(dir, &e))?;
    Ok(archive.into_inner())
}

/// Whether a `deploy` argument names a charm directory or archive rather
/// than a charm: it has a `/`, starts with `.`, ends with `.charm`, or is
/// an existing directory.
pub fn is_path(charm_arg: &str) -> bool {
    charm_arg.contains('/')
        || charm_arg.starts_with('.')
        || charm_arg.ends_with(".charm")
        || Path::new(charm_arg).is_dir()
}

/// The charm a `deploy` argument means: the charm directory at that path
/// (see [`is_path`] and [`load_charm_dir`]), or else a name-only charm
/// ([`Charm::name_only`], `ch:<name>-0`) whose sha256 is that of its name.
///
/// # Errors
///
/// Those of [`load_charm_dir`] for a path;
/// [`CharmLoadError::InvalidName`] for a name that is not valid by the
/// rules of application names.
pub fn resolve(charm_arg: &str) -> Result<ParsedCharm, CharmLoadError> {
    if is_path(charm_arg) {
        return load_charm_dir(Path::new(charm_arg));
    }
    let name: ApplicationName = charm_arg
        .parse()
        .map_err(|_| CharmLoadError::InvalidName(charm_arg.to_string()))?;
    let sha256 = hex(&Sha256::digest(name.as_str().as_bytes()));
    Ok(ParsedCharm {
        charm: Charm::name_only(name),
        sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::base::Base;
    use crate::domain::charm::{OptionType, Scope};

    const METADATA: &str =
        "name: wordpress\nsummary: Blog\nrequires:\n  db: mysql\nseries: [jammy]\n";
    const CONFIG: &str = "options:\n  port: {type: int, default: 80}\n";

    fn charm_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, content) in files {
            let path = dir.path().join(name);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, content).unwrap();
        }
        dir
    }

    /// A zip archive of `files` (name, content), as any zip tool makes.
    fn zip_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        use std::io::Write as _;
        let mut zip = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, content) in files {
            zip.start_file(*name, options).unwrap();
            zip.write_all(content).unwrap();
        }
        zip.finish().unwrap().into_inner()
    }

    fn archive_error(bytes: &[u8]) -> String {
        load_charm_archive(bytes).unwrap_err().to_string()
    }

    #[test]
    fn a_packed_directory_loads_as_the_directory_does_with_the_same_digest() {
        let dir = charm_dir(&[
            (METADATA_FILE, METADATA),
            (CONFIG_FILE, CONFIG),
            (REVISION_FILE, "3\n"),
            ("hooks/install", "#!/bin/sh\n"),
        ]);
        #[cfg(unix)]
        std::os::unix::fs::symlink("install", dir.path().join("hooks/start")).unwrap();
        let from_dir = load(&dir);
        let archive = pack_charm_dir(dir.path()).unwrap();
        let from_archive = load_charm_archive(&archive).unwrap();
        assert_eq!(from_archive, from_dir);
        assert_eq!(from_archive.charm.url().to_string(), "local:wordpress-3");
        // Packed again, the same bytes: nothing depends on when or where.
        assert_eq!(pack_charm_dir(dir.path()).unwrap(), archive);
    }

    #[test]
    fn a_zip_made_by_another_tool_loads_too() {
        let archive = zip_of(&[
            ("metadata.yaml", METADATA.as_bytes()),
            ("./config.yaml", CONFIG.as_bytes()),
            ("hooks/", b""),
        ]);
        let loaded = load_charm_archive(&archive).unwrap();
        assert_eq!(loaded.charm.url().to_string(), "local:wordpress-0");
        assert!(loaded.charm.config().option("port").is_some());
    }

    #[test]
    fn archive_entries_that_escape_the_root_are_refused() {
        for name in ["../evil", "/etc/passwd", "hooks/../../evil", "..\\evil"] {
            let archive = zip_of(&[("metadata.yaml", METADATA.as_bytes()), (name, b"x")]);
            assert_eq!(
                archive_error(&archive),
                format!("charm archive entry {name:?} escapes the charm's root: entries must be relative paths without '..'"),
            );
        }
    }

    #[test]
    fn what_is_not_a_charm_archive_is_refused_naming_why() {
        assert!(archive_error(b"not a zip at all").starts_with("not a charm archive: "));
        assert!(archive_error(b"").starts_with("not a charm archive: "));
        assert_eq!(
            archive_error(&zip_of(&[("config.yaml", CONFIG.as_bytes())])),
            "charm archive has no metadata.yaml at its root: a charm must have one"
        );
        assert_eq!(
            archive_error(&zip_of(&[("wordpress/metadata.yaml", METADATA.as_bytes())])),
            "charm archive has no metadata.yaml at its root: a charm must have one"
        );
        let bad = archive_error(&zip_of(&[("metadata.yaml", b"name: [unclosed")]));
        assert!(bad.starts_with("metadata.yaml: "), "{bad}");
        let bad = archive_error(&zip_of(&[
            ("metadata.yaml", METADATA.as_bytes()),
            ("revision", b"seven"),
        ]));
        assert_eq!(bad, "revision: expected a revision number, got \"seven\"");
    }

    #[test]
    fn archives_beyond_the_limits_are_refused_before_they_are_unpacked_whole() {
        let too_big = vec![0u8; MAX_ARCHIVE_BYTES + 1];
        assert!(archive_error(&too_big).starts_with("charm archive too large: "));
        // Zeros deflate to almost nothing: the archive is small, what it
        // unpacks to is not.
        let zeros = vec![0u8; usize::try_from(MAX_UNPACKED_BYTES).unwrap() + 1];
        let bomb = zip_of(&[("metadata.yaml", METADATA.as_bytes()), ("zeros", &zeros)]);
        assert!(bomb.len() < MAX_ARCHIVE_BYTES / 10);
        assert_eq!(
            archive_error(&bomb),
            format!("charm archive too large: it unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        );
    }

    #[test]
    fn a_directory_that_is_not_a_charm_is_not_packed() {
        let dir = charm_dir(&[(CONFIG_FILE, CONFIG)]);
        assert!(pack_charm_dir(dir.path())
            .unwrap_err()
            .to_string()
            .contains("must hold metadata.yaml"));
    }

    fn load(dir: &tempfile::TempDir) -> ParsedCharm {
        load_charm_dir(dir.path()).unwrap()
    }

    fn load_error(dir: &Path) -> String {
        load_charm_dir(dir).unwrap_err().to_string()
    }

    #[test]
    fn a_charm_directory_loads_its_metadata_and_config() {
        let dir = charm_dir(&[(METADATA_FILE, METADATA), (CONFIG_FILE, CONFIG)]);
        let loaded = load(&dir);
        let charm = &loaded.charm;
        assert_eq!(charm.url().to_string(), "local:wordpress-0");
        assert_eq!(
            charm.meta().bases(),
            &["ubuntu@22.04".parse::<Base>().unwrap()]
        );
        assert_eq!(
            charm.meta().requires()[&"db".parse().unwrap()].scope,
            Scope::Global
        );
        assert_eq!(
            charm.config().option("port").unwrap().kind(),
            OptionType::Int
        );
        assert_eq!(loaded.sha256.len(), 64);
        assert!(loaded
            .sha256
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    }

    #[test]
    fn a_charm_without_config_yaml_has_no_options() {
        let dir = charm_dir(&[(METADATA_FILE, METADATA)]);
        assert!(load(&dir).charm.config().options().is_empty());
    }

    #[test]
    fn a_revision_file_sets_the_revision() {
        let dir = charm_dir(&[(METADATA_FILE, METADATA), (REVISION_FILE, "7\n")]);
        assert_eq!(load(&dir).charm.url().to_string(), "local:wordpress-7");
    }

    #[test]
    fn a_revision_file_must_hold_a_number() {
        let dir = charm_dir(&[(METADATA_FILE, METADATA), (REVISION_FILE, "seven\n")]);
        assert_eq!(
            load_error(dir.path()),
            format!(
                "{}: expected a revision number, got \"seven\\n\"",
                dir.path().join(REVISION_FILE).display()
            )
        );
    }

    #[test]
    fn a_directory_without_metadata_yaml_is_not_a_charm() {
        let dir = charm_dir(&[(CONFIG_FILE, CONFIG)]);
        assert_eq!(
            load_error(dir.path()),
            format!(
                "{} not found: a charm directory must hold metadata.yaml",
                dir.path().join(METADATA_FILE).display()
            )
        );
    }

    #[test]
    fn a_missing_directory_is_reported() {
        let dir = charm_dir(&[]);
        let missing = dir.path().join("nowhere");
        let err = load_charm_dir(&missing).unwrap_err();
        assert!(matches!(&err, CharmLoadError::NoDirectory { path, .. } if path == &missing));
        assert!(
            err.to_string().starts_with(&format!(
                "cannot open charm directory {}: ",
                missing.display()
            )),
            "{err}"
        );
    }

    #[test]
    fn a_file_is_not_a_charm_directory() {
        let dir = charm_dir(&[(METADATA_FILE, METADATA)]);
        let file = dir.path().join(METADATA_FILE);
        assert_eq!(
            load_error(&file),
            format!(
                "{} is not a directory: a local charm is a directory holding metadata.yaml",
                file.display()
            )
        );
    }

    #[test]
    fn bad_metadata_yaml_is_reported_with_the_file_and_line() {
        let dir = charm_dir(&[(METADATA_FILE, "name: wordpress\nprovides:\n  db: [mysql\n")]);
        let err = load_error(dir.path());
        let prefix = format!(
            "{}: invalid YAML: ",
            dir.path().join(METADATA_FILE).display()
        );
        assert!(err.starts_with(&prefix), "{err}");
        assert!(err.contains("line 4"), "{err}");
    }

    #[test]
    fn invalid_metadata_is_reported_with_the_file() {
        let dir = charm_dir(&[(METADATA_FILE, "name: ntp\nsubordinate: true\n")]);
        assert_eq!(
            load_error(dir.path()),
            format!(
                "{}: subordinate charm \"ntp\" lacks \"requires\" relation with container scope",
                dir.path().join(METADATA_FILE).display()
            )
        );
    }

    #[test]
    fn invalid_config_is_reported_with_the_file() {
        let dir = charm_dir(&[(METADATA_FILE, METADATA), (CONFIG_FILE, "")]);
        assert_eq!(
            load_error(dir.path()),
            format!(
                "{}: invalid config: empty configuration",
                dir.path().join(CONFIG_FILE).display()
            )
        );
    }

    #[test]
    fn metadata_that_is_not_utf8_is_unreadable() {
        let dir = charm_dir(&[]);
        let path = dir.path().join(METADATA_FILE);
        fs::write(&path, b"name: \xff\n").unwrap();
        let err = load_charm_dir(dir.path()).unwrap_err();
        assert!(matches!(&err, CharmLoadError::Unreadable { path: p, .. } if p == &path));
        assert!(
            err.to_string()
                .starts_with(&format!("cannot read {}: ", path.display())),
            "{err}"
        );
    }

    #[test]
    fn the_sha256_is_stable_across_reloads_and_copies() {
        let files = [
            (METADATA_FILE, METADATA),
            (CONFIG_FILE, CONFIG),
            ("hooks/install", "#!/bin/sh\necho hi\n"),
            ("README.md", "Wordpress"),
        ];
        let dir = charm_dir(&files);
        let first = load(&dir).sha256;
        assert_eq!(load(&dir).sha256, first);
        let mut reversed = files;
        reversed.reverse();
        assert_eq!(load(&charm_dir(&reversed)).sha256, first);
    }

    #[test]
    fn the_sha256_changes_with_an_edit_a_new_file_or_a_rename() {
        let dir = charm_dir(&[(METADATA_FILE, METADATA), ("hooks/install", "echo hi\n")]);
        let before = load(&dir).sha256;

        fs::write(dir.path().join("hooks/install"), "echo bye\n").unwrap();
        let edited = load(&dir).sha256;
        assert_ne!(edited, before);

        fs::write(dir.path().join("hooks/start"), "").unwrap();
        let added = load(&dir).sha256;
        assert_ne!(added, edited);

        fs::rename(
            dir.path().join("hooks/start"),
            dir.path().join("hooks/stop"),
        )
        .unwrap();
        let renamed = load(&dir).sha256;
        assert_ne!(renamed, added);
    }

    #[test]
    fn moving_bytes_between_name_and_content_changes_the_sha256() {
        let a = charm_dir(&[(METADATA_FILE, METADATA), ("ab", "c")]);
        let b = charm_dir(&[(METADATA_FILE, METADATA), ("a", "bc")]);
        assert_ne!(load(&a).sha256, load(&b).sha256);
    }

    #[test]
    fn empty_directories_do_not_change_the_sha256() {
        let dir = charm_dir(&[(METADATA_FILE, METADATA)]);
        let before = load(&dir).sha256;
        fs::create_dir(dir.path().join("empty")).unwrap();
        assert_eq!(load(&dir).sha256, before);
    }

    #[cfg(unix)]
    #[test]
    fn symbolic_links_are_hashed_by_their_target_not_followed() {
        let dir = charm_dir(&[(METADATA_FILE, METADATA), ("real", "x")]);
        let without = load(&dir).sha256;
        std::os::unix::fs::symlink("real", dir.path().join("alias")).unwrap();
        let with = load(&dir).sha256;
        assert_ne!(with, without);
        fs::write(dir.path().join("real"), "y").unwrap();
        let edited_target = load(&dir).sha256;
        std::os::unix::fs::symlink("..", dir.path().join("loop")).unwrap();
        assert_ne!(load(&dir).sha256, edited_target);
    }

    #[cfg(unix)]
    #[test]
    fn a_charm_whose_own_files_are_links_is_refused_loaded_or_packed() {
        for file in [METADATA_FILE, CONFIG_FILE, REVISION_FILE] {
            let dir = charm_dir(&[
                (METADATA_FILE, METADATA),
                (CONFIG_FILE, CONFIG),
                (REVISION_FILE, "3\n"),
            ]);
            let real = format!("real-{file}");
            fs::rename(dir.path().join(file), dir.path().join(&real)).unwrap();
            std::os::unix::fs::symlink(&real, dir.path().join(file)).unwrap();
            let expected = format!(
                "{} is a symbolic link: a charm's own files must be regular files",
                dir.path().join(file).display()
            );
            assert_eq!(load_error(dir.path()), expected);
            assert_eq!(
                pack_charm_dir(dir.path()).unwrap_err().to_string(),
                expected
            );
        }
    }

    #[test]
    fn an_archive_whose_charm_files_are_links_is_refused() {
        use std::io::Write as _;
        for file in [METADATA_FILE, CONFIG_FILE, REVISION_FILE] {
            let mut zip = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
            let options = zip::write::SimpleFileOptions::default();
            if file != METADATA_FILE {
                zip.start_file(METADATA_FILE, options).unwrap();
                zip.write_all(METADATA.as_bytes()).unwrap();
            }
            zip.start_file("real", options).unwrap();
            zip.write_all(CONFIG.as_bytes()).unwrap();
            zip.add_symlink(file, "real", options).unwrap();
            let archive = zip.finish().unwrap().into_inner();
            assert_eq!(
                archive_error(&archive),
                format!("{file} is a symbolic link: a charm's own files must be regular files")
            );
        }
    }

    #[test]
    fn a_name_resolves_to_a_name_only_charm_hashed_by_its_name() {
        let loaded = resolve("wordpress").unwrap();
        assert_eq!(loaded.charm.url().to_string(), "ch:wordpress-0");
        assert!(loaded.charm.config().options().is_empty());
        // printf wordpress | sha256sum
        assert_eq!(
            loaded.sha256,
            "576473d6a73d7f55ed882786af3060c6979bb16fe59962549cce647efe8f9f3f"
        );
    }

    #[test]
    fn an_invalid_name_is_refused_with_both_forms_explained() {
        let err = resolve("Word_Press").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#""Word_Press" is not a valid charm name: expected a charm name (such as wordpress) or a path to a charm directory (such as ./wordpress)"#
        );
        assert!(matches!(resolve(""), Err(CharmLoadError::InvalidName(s)) if s.is_empty()));
    }

    #[test]
    fn a_path_resolves_to_the_charm_directory() {
        let dir = charm_dir(&[(METADATA_FILE, METADATA)]);
        let arg = dir.path().to_str().unwrap();
        assert!(arg.contains('/'));
        let loaded = resolve(arg).unwrap();
        assert_eq!(loaded, load(&dir));
    }

    #[test]
    fn arguments_with_a_slash_or_a_leading_dot_are_paths() {
        assert!(is_path("./wordpress"));
        assert!(is_path("charms/wordpress"));
        assert!(is_path(".hidden"));
        assert!(is_path("/"));
        // An archive in the working directory, there or not (a name has
        // no dot).
        assert!(is_path("wordpress.charm"));
        assert!(!is_path("wordpress-that-is-no-directory-here"));
        assert!(matches!(
            resolve("./no-such-charm-dir"),
            Err(CharmLoadError::NoDirectory { .. })
        ));
    }
}
