/* mpi_shim.h: the MPI handles and macros cgo cannot name directly. */
#ifndef DG_MPI_SHIM_H
#define DG_MPI_SHIM_H
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>

MPI_Comm dg_world(void);
MPI_Comm dg_comm_null(void);
void *dg_in_place(void);
int dg_undefined(void);
/* dg_dtype: 0 float32, 3 int32, 4 int64, anything else bytes. */
MPI_Datatype dg_dtype(int code);
/* dg_op: 2 max, 3 min, anything else sum. */
MPI_Op dg_op(int code);
int dg_errors_return(MPI_Comm c);
int dg_testall(int n, MPI_Request *r, int *flag);
int dg_cancel_free(MPI_Request *r);
int dg_error_string(int code, char *buf, int *len);
#endif
