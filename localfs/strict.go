package localfs

import (
	"bytes"
	"encoding/json"
	"fmt"
)

func unmarshalStrict(p []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the payload")
	}
	return nil
}
