-- E-mail check-ins (docs/rules.md#e-mail-check-ins): a snitch's e-mail keywords, one JSON
-- text ({"failure": [...], "success": [...], "start": [...], "search": "both"}), NULL for a
-- snitch without keywords (every e-mail a success).
ALTER TABLE snitch.snitches ADD COLUMN email_keywords text;
