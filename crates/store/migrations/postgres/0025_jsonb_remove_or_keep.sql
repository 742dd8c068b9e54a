-- The semantic-duplicate scan removes pointers from each payload with `#-`, which fails
-- the whole statement when a path names a key where the payload holds an array
-- ("path element at position 2 is not an integer"): one such event, which ingestion
-- accepts (the field is then absent), made every scan of its contract version fail.
-- The scan retries such a field with this function, which removes the path where it
-- can and leaves the document as it is where the path addresses nothing.
CREATE FUNCTION traqlyte_jsonb_remove(doc JSONB, path TEXT[]) RETURNS JSONB
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN doc #- path;
EXCEPTION WHEN invalid_text_representation THEN
    RETURN doc;
END
$$;
