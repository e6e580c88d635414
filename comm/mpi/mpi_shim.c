//go:build mpi

#include "mpi_shim.h"

MPI_Comm dg_world(void) { return MPI_COMM_WORLD; }
MPI_Comm dg_comm_null(void) { return MPI_COMM_NULL; }
void *dg_in_place(void) { return MPI_IN_PLACE; }
int dg_undefined(void) { return MPI_UNDEFINED; }
MPI_Datatype dg_dtype(int code) {
	switch (code) {
	case 0: return MPI_FLOAT;
	case 3: return MPI_INT32_T;
	case 4: return MPI_INT64_T;
	}
	return MPI_BYTE;
}
MPI_Op dg_op(int code) {
	switch (code) {
	case 2: return MPI_MAX;
	case 3: return MPI_MIN;
	}
	return MPI_SUM;
}
int dg_errors_return(MPI_Comm c) { return MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN); }
int dg_testall(int n, MPI_Request *r, int *flag) { return MPI_Testall(n, r, flag, MPI_STATUSES_IGNORE); }
int dg_cancel_free(MPI_Request *r) {
	if (*r == MPI_REQUEST_NULL) return MPI_SUCCESS;
	MPI_Cancel(r);
	return MPI_Request_free(r);
}
int dg_error_string(int code, char *buf, int *len) { return MPI_Error_string(code, buf, len); }
