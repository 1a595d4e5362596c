//! The editor bridge: the tools see the open buffers and apply edits through `workspace/applyEdit`.

use super::*;

impl tools::Editor for State {
    fn snapshot(&self, path: &Path) -> Option<Snapshot> {
        read(&self.documents).get(path)
    }

    /// Sends `workspace/applyEdit` and waits for the editor's answer. Called from a tool's
    /// blocking thread, never from the async runtime's own threads.
    fn apply(&self, path: &Path, version: i32, replacements: &[Replacement]) -> Result<(), String> {
        let (snapshot, encoding) = {
            let documents = read(&self.documents);
            (documents.get(path), documents.encoding())
        };
        let snapshot = snapshot.ok_or("the document was closed in the editor")?;
        if snapshot.version != version {
            return Err(format!(
                "the document changed in the editor (version {version} was read, it is now {})",
                snapshot.version
            ));
        }
        let uri = protocol::path_to_uri(path).ok_or("the path has no file URI")?;
        let edit = workspace_edit(
            uri,
            version,
            &snapshot,
            encoding,
            replacements,
            *read(&self.versioned_edits),
        );
        let answer = self
            .runtime
            .block_on(self.client.apply_edit(edit))
            .map_err(|e| format!("the editor did not answer workspace/applyEdit ({e})"))?;
        if answer.applied {
            Ok(())
        } else {
            Err(answer
                .failure_reason
                .unwrap_or_else(|| "the editor refused it without a reason".to_string()))
        }
    }
}

/// The workspace edit for `replacements` of one document: versioned when the client supports
/// it, so the editor itself refuses an edit of a buffer that moved on.
fn workspace_edit(
    uri: tower_lsp_server::ls_types::Uri,
    version: i32,
    snapshot: &Snapshot,
    encoding: PositionEncoding,
    replacements: &[Replacement],
    versioned: bool,
) -> WorkspaceEdit {
    let edits: Vec<TextEdit> = replacements
        .iter()
        .map(|r| TextEdit {
            range: protocol::to_lsp_range(snapshot.range_of(r.range.clone(), encoding)),
            new_text: r.text.clone(),
        })
        .collect();
    if versioned {
        WorkspaceEdit {
            document_changes: Some(DocumentChanges::Edits(vec![TextDocumentEdit {
                text_document: OptionalVersionedTextDocumentIdentifier {
                    uri,
                    version: Some(version),
                },
                edits: edits.into_iter().map(OneOf::Left).collect(),
            }])),
            ..Default::default()
        }
    } else {
        WorkspaceEdit {
            changes: Some([(uri, edits)].into_iter().collect()),
            ..Default::default()
        }
    }
}
