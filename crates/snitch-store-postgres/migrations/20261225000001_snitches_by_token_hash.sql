-- Every save finds its snitch by token (a check-in's update is a nested loop over the
-- batch, one lookup per snitch): a hash index finds it in one bucket, where the primary
-- key's B-tree compares the 20-character token on every level under the database's
-- collation (issue 12). The primary key stays: events reference it, and it keeps tokens
-- unique. The token never changes, so updates stay HOT.
CREATE INDEX snitches_by_token_hash ON snitch.snitches USING hash (token);
