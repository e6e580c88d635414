package shareddata

// LossScalerRecord is one line of the loss-scaler golden files
// (loss_scaler.jsonl, loss_scaler.deepspeedai.jsonl,
// loss_scaler.fp16_optimizer.jsonl; the golden README describes the
// fields): DeepSpeed's dynamic loss scaler built from Params, then
// update_scale called once per character of Overflow.
type LossScalerRecord struct {
	Name   string `json:"name"`
	Params struct {
		InitScale             float64 `json:"init_scale"`
		ScaleWindow           int     `json:"scale_window"`
		MinScale              float64 `json:"min_scale"`
		DelayedShift          int     `json:"delayed_shift"`
		ConsecutiveHysteresis bool    `json:"consecutive_hysteresis"`
		RaiseErrorAtMinScale  bool    `json:"raise_error_at_min_scale"`
		ScaleFactor           float64 `json:"scale_factor"`
	} `json:"params"`
	InitialScale    float64   `json:"initial_scale"`
	Length          int       `json:"length"`
	Overflow        string    `json:"overflow"`
	ScaleAfter      []float64 `json:"scale_after"`
	HysteresisAfter []int     `json:"hysteresis_after"`
	Error           *struct {
		AtIndex int    `json:"at_index"`
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}
