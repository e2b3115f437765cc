//! Finding the admin token: `--token` or `BERTH_TOKEN` when given, else the
//! file the controller writes into its data directory when it starts, so
//! that on the controller's own machine the command line needs no setup.

use std::path::{Path, PathBuf};

use crate::cli::error::CliError;

/// The file in the data directory that holds the admin token in clear
/// (readable by its owner only). `berth serve` writes it; the command
/// line reads it.
pub const ADMIN_TOKEN_FILE: &str = "admin.token";

/// Where the admin token is kept in `data_dir`.
pub fn admin_token_path(data_dir: &Path) -> PathBuf {
    data_dir.join(ADMIN_TOKEN_FILE)
}

/// The admin token: `given` (from `--token` or `BERTH_TOKEN`) unless it is
/// empty, else the contents of `<data_dir>/admin.token` without
/// surrounding whitespace.
///
/// # Errors
///
/// [`CliError::NoToken`], naming the file it looked for and why it could
/// not be used (missing, unreadable or empty).
pub fn discover(given: Option<&str>, data_dir: &Path) -> Result<String, CliError> {
    if let Some(token) = given.map(str::trim).filter(|t| !t.is_empty()) {
        return Ok(token.to_string());
    }
    let path = admin_token_path(data_dir);
    let text = std::fs::read_to_string(&path).map_err(|e| CliError::NoToken {
        path: path.clone(),
        reason: match e.kind() {
            std::io::ErrorKind::NotFound => "no such file".to_string(),
            _ => e.to_string(),
        },
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(CliError::NoToken {
            path,
            reason: "the file is empty".to_string(),
        });
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_token_wins_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("admin.token"), "from-file\n").unwrap();
        assert_eq!(discover(Some("given"), dir.path()).unwrap(), "given");
    }

    #[test]
    fn without_a_given_token_the_data_directorys_file_is_read_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("admin.token"), "  abc123\n").unwrap();
        assert_eq!(discover(None, dir.path()).unwrap(), "abc123");
        assert_eq!(discover(Some(""), dir.path()).unwrap(), "abc123");
    }

    #[test]
    fn a_missing_token_file_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = discover(None, dir.path()).unwrap_err();
        let path = dir.path().join("admin.token");
        assert_eq!(
            e.to_string(),
            format!(
                "no admin token: none was given with --token or BERTH_TOKEN, and {} cannot be read \
                 (no such file); run this on the controller's machine, or pass --token",
                path.display()
            )
        );
        assert_eq!(e.exit_code(), 1);
    }

    #[test]
    fn an_empty_token_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("admin.token"), "\n").unwrap();
        let e = discover(None, dir.path()).unwrap_err();
        assert!(e.to_string().contains("(the file is empty)"), "{e}");
    }
}
